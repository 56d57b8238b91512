package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// A SIGTERM at the very start of a supervisor in PID 1, the kubelet's to a
// pod deleted as it starts, is answered: exit 143, every time, with the
// signal's log line. Sent right after the exec returns, it mostly comes
// while the Go runtime starts, where before the guard at the binary's entry
// (earlysig/entry.go) the kernel dropped it (an init process gets no
// signal it has no handler for, and the supervisor ran on, ignoring it) or
// the runtime's default action exited 2. Sent once the project's packages
// are initialised (the runtime's report, GODEBUG=inittrace=1, that the last
// of them with work to initialise, internal/supervise, is done), it meets
// the early subscription. Each start gets one signal, and must end on it.
func TestSigtermAtStartNeverExits2(t *testing.T) {
	t.Parallel()
	const starts = 200
	p := newPod(t)
	inited := "init github.com/proxy-supervisor/proxy-supervisor/internal/supervise @"
	for _, at := range []string{inited, ""} {
		when := "right after exec"
		if at != "" {
			when = "once the packages are initialised"
		}
		var guard, beforeFork, afterFork int
		for i := range starts {
			code, out := sigtermAtStart(t, p, supervisorArgs(filepath.Join(p.dir, fmt.Sprint(i))), at)
			switch {
			case !answeredStop(code, out, "signal received"):
				t.Fatalf("start %d, SIGTERM %s: exit %d, want 143 with the signal's log line (%d starts answered before):\n%s", i, when, code, i, out)
			case strings.Contains(out, guardLine):
				guard++
			case strings.Contains(out, "proxy started"):
				afterFork++
			default:
				beforeFork++
			}
		}
		t.Logf("%d starts with SIGTERM %s: all exited 143; %d answered by the guard, %d by the supervisor before it started the proxy, %d after", starts, when, guard, beforeFork, afterFork)
	}
}

// The app container's exec, PID 1 of its own container, answers a SIGTERM
// at its very start as the supervisor does: 143, never exit 2 or a lost
// signal. That is what a Job's podFailurePolicy reads of a pod deleted as
// its app starts (the real kubelet's deleted-native-foreground gave 2).
func TestExecSigtermAtStartExits143(t *testing.T) {
	t.Parallel()
	const starts = 200
	p := newPod(t)
	var guard int
	for i := range starts {
		// No supervisor runs: exec waits for the proxy, and the signal
		// ends the wait.
		args := []string{"exec", "--control-dir", filepath.Join(p.dir, fmt.Sprint(i)), "--name", "job", "--", "true"}
		code, out := sigtermAtStart(t, p, args, "")
		if !answeredStop(code, out, "SIGTERM while waiting for the") {
			t.Fatalf("start %d: exit %d, want 143 with the signal's line (%d starts answered before):\n%s", i, code, i, out)
		}
		if strings.Contains(out, guardLine) {
			guard++
		}
	}
	t.Logf("%d exec starts with SIGTERM right after exec: all exited 143; %d answered by the guard", starts, guard)
}

// guardLine is what the guard at the binary's entry writes when it
// answers a stop signal for a command that had not subscribed it yet.
const guardLine = "a stop signal came before the command could answer it"

// answeredStop says whether a process ended on a SIGTERM as it must: 143,
// with the command's line for it (logged) or the guard's.
func answeredStop(code int, out, logged string) bool {
	return code == 143 && (strings.Contains(out, logged) || strings.Contains(out, guardLine))
}

func supervisorArgs(dir string) []string {
	return []string{"supervise", "--control-dir", dir, "--health-addr", "", "--", bin.envoy, "--stay-initializing"}
}

// sigtermAtStart starts the binary with args as PID 1 and sends it one
// SIGTERM as soon as its stderr has a line that starts with at, or if at
// is "" as soon as it can take the signal at all: once the exec has given
// it a handler (catches). Sooner, the signal would fall inside the exec,
// where the kernel drops it for any init process: no program can answer
// it. It returns the exit code and the output; a process that has not
// ended on the signal within soon is killed, and its code is -1.
func sigtermAtStart(t *testing.T, p *pod, args []string, at string) (code int, out string) {
	t.Helper()
	cmd := exec.Command(bin.supervisor, args...)
	cmd.Env = cleanEnv([]string{"GODEBUG=inittrace=1"})
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = p.netns.Do(cmd.Start)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if at == "" {
		// A tight loop, not Until's backing off: the runtime's start,
		// the moment that matters, is milliseconds long.
		for deadline := time.Now().Add(soon); !catches(cmd.Process.Pid, syscall.SIGTERM); {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("the supervisor had no handler for SIGTERM within %v of its exec", soon)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
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
	select {
	case <-exited:
		return exitCode(cmd.ProcessState), buf.String()
	case <-time.After(soon):
		cmd.Process.Kill()
		<-exited
		return -1, buf.String() + fmt.Sprintf("(still running %v after the SIGTERM: the signal was lost)\n", soon)
	}
}

// catches says whether the process pid has a handler for sig
// (/proc/PID/status's SigCgt mask).
func catches(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			return err == nil && m&(1<<(sig-1)) != 0
		}
	}
	return false
}
