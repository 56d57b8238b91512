package e2e

import (
	"fmt"
	"os"
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
// of bad usage, in up to 23 of 40 starts. (Go's runtime installs its
// handler before any of the supervisor's code runs; a SIGTERM in that first
// millisecond still exits 2, and no Go program can answer it.)
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
