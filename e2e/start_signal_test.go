package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// A SIGTERM at any step of the start, before the proxy was ever ready,
// exits 143 as the exit-code table says, with a log line. It met Go's
// default action until the records were read, and PID 1 exited 2, the code
// of bad usage, in up to 23 of 40 starts. (What comes earlier still is
// TestSigtermAtStartNeverExits2's.)
func TestSigtermDuringStartExits143(t *testing.T) {
	t.Parallel()
	type step struct {
		name  string
		after func(p *pod, sup *proctest.Proc) bool // the step has been reached
		delay time.Duration
	}
	logged := func(s string) func(*pod, *proctest.Proc) bool {
		return func(_ *pod, sup *proctest.Proc) bool { return strings.Contains(sup.Out.String(), s) }
	}
	// The first log line comes once the flags are read; the delays after it
	// reach into the records, the sockets and the fork.
	var steps []step
	for _, d := range []time.Duration{0, 200 * time.Microsecond, 500 * time.Microsecond, time.Millisecond,
		2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond} {
		steps = append(steps, step{fmt.Sprint("flags read+", d), logged("drain bound derived"), d})
	}
	steps = append(steps,
		step{"control socket bound", func(p *pod, _ *proctest.Proc) bool {
			_, err := os.Stat(filepath.Join(p.dir, "sock", "control.sock"))
			return err == nil
		}, 0},
		step{"proxy started", logged("proxy started"), 0},
		// 300 records of peers that succeeded (of 1000) take some
		// milliseconds to read: the signal comes once the supervisor has
		// the records directory open, or as soon after as it is seen.
		step{"records read", func(p *pod, sup *proctest.Proc) bool {
			fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", sup.Cmd.Process.Pid))
			for _, fd := range fds {
				if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", sup.Cmd.Process.Pid, fd.Name())); l == filepath.Join(p.dir, "peers") {
					return true
				}
			}
			return strings.Contains(sup.Out.String(), "proxy started") // seen too late: send it anyway
		}, 0},
	)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			p := newPod(t)
			flags := []string{"--grace-period", "30s"}
			if st.name == "records read" {
				d := peers.Open(p.dir)
				if err := d.Create(); err != nil {
					t.Fatal(err)
				}
				for i := range 300 {
					if err := d.Write(peers.Record{Name: fmt.Sprint("done-", i), Reason: peers.Exited}); err != nil {
						t.Fatal(err)
					}
				}
				flags = append(flags, "--peers", "1000")
			}
			sup := p.supervise(flags, "--stay-initializing")
			for deadline := time.Now().Add(soon); !st.after(p, sup); {
				if sup.Wait(0) {
					t.Fatalf("supervisor exited %d before the step:\n%s", sup.Code(), sup.Out.String())
				}
				if time.Now().After(deadline) {
					t.Fatalf("the step %s not reached within %v:\n%s", st.name, soon, sup.Out.String())
				}
				time.Sleep(50 * time.Microsecond) // the steps are microseconds apart
			}
			time.Sleep(st.delay)
			sup.Signal(syscall.SIGTERM)
			if code := sup.Exit(soon); code != 143 {
				t.Fatalf("exit %d after SIGTERM at %s, want 143", code, st.name)
			}
			if !strings.Contains(sup.Out.String(), "signal received") {
				t.Fatalf("no log line of the signal:\n%s", sup.Out.String())
			}
		})
	}
}

// A SIGTERM that comes once the project's packages are initialised, before
// any command's code has run, is the supervisor's to answer (143) from its
// start, never Go's default action, exit 2 (bad usage) with no log line:
// the signals are subscribed first of the project's code (earlysig). The
// moment is the runtime's report (GODEBUG=inittrace=1) that the last of
// the project's packages with work to initialise, internal/supervise, is
// done. While the subscription waited for runSupervise, the signal met
// Go's default in about half of such starts.
//
// Sent right after the exec instead, the signal mostly comes while the
// runtime starts: before its handlers are installed, the kernel drops it
// (an init process gets no signal it has no handler for), and between
// then and os/signal's initialisation, which no package's init can
// precede, Go's default still exits 2. That is measured and logged, not
// held to zero: no Go program can close it.
func TestSigtermAtStartNeverExits2(t *testing.T) {
	t.Parallel()
	const starts = 200
	p := newPod(t)
	inited := "init github.com/proxy-supervisor/proxy-supervisor/internal/supervise @"
	for _, at := range []string{inited, ""} {
		var answered, dropped int
		var twos []string
		for i := range starts {
			code, second, out := sigtermAtStart(t, p, filepath.Join(p.dir, fmt.Sprint(i)), at)
			switch {
			case code == 143 && second:
				dropped++
			case code == 143:
				answered++
			case code == 2:
				twos = append(twos, out)
			default:
				t.Fatalf("start %d: exit %d, want 143:\n%s", i, code, out)
			}
		}
		when := "right after exec"
		if at != "" {
			when = "once the packages are initialised"
		}
		t.Logf("%d starts with SIGTERM %s: %d answered before the fork, %d exited 143 only after the proxy started (the signal dropped by the kernel, or seen after the fork), %d exit 2",
			starts, when, answered, dropped, len(twos))
		if at != "" && len(twos) > 0 {
			t.Errorf("%d of %d starts with SIGTERM %s exited 2 (Go's default action); the first one's output:\n%s", len(twos), starts, when, twos[0])
		}
	}
}

// sigtermAtStart starts a supervisor as PID 1 and sends it SIGTERM as soon
// as its stderr has a line that starts with at, or as soon as its exec has
// returned if at is "". A SIGTERM that the kernel dropped, or that came
// after the fork, leaves it to start the proxy, and is sent again then
// (second). It returns the exit code and the output.
func sigtermAtStart(t *testing.T, p *pod, dir, at string) (code int, second bool, out string) {
	t.Helper()
	cmd := exec.Command(bin.supervisor, "supervise", "--control-dir", dir, "--health-addr", "",
		"--", bin.envoy, "--stay-initializing")
	cmd.Env = cleanEnv([]string{"GODEBUG=inittrace=1"})
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = p.netns.Do(func() error {
		if err := cmd.Start(); err != nil || at != "" {
			return err
		}
		return cmd.Process.Signal(syscall.SIGTERM)
	})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	buf := new(proctest.Buffer)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if at != "" && strings.HasPrefix(sc.Text(), at) {
				cmd.Process.Signal(syscall.SIGTERM)
				at = ""
			}
			buf.Write(append(sc.Bytes(), '\n'))
		}
	}()
	exited := make(chan struct{})
	go func() { <-read; cmd.Wait(); close(exited) }()
	// Answered, it exits at once; dropped, it starts the proxy; met by Go's
	// default, it exits 2, at once or while it goes on starting.
	started := proctest.Until(soon, func() bool {
		select {
		case <-exited:
			return true
		default:
			return strings.Contains(buf.String(), "proxy started")
		}
	})
	select {
	case <-exited:
	default:
		if !started {
			cmd.Process.Kill()
			<-exited
			t.Fatalf("neither exited nor started the proxy within %v:\n%s", soon, buf.String())
		}
		second = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(soon):
			cmd.Process.Kill()
			<-exited
			t.Fatalf("a SIGTERM after the proxy started did not end it:\n%s", buf.String())
		}
	}
	return exitCode(cmd.ProcessState), second, buf.String()
}
