package proctest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
)

// Proc is a process a test started.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Out  *Buffer // its stdout and stderr, unless the caller set them

	tb    testing.TB
	done  chan struct{}
	code  int
	state *os.ProcessState
	ended time.Time
}

// Start starts cmd in its own process group and fails the test if it cannot.
// The process dies with the test binary, and the test's cleanup kills its
// group and waits for it, logging its output if the test failed.
func Start(tb testing.TB, name string, cmd *exec.Cmd) *Proc {
	tb.Helper()
	return StartWith(tb, name, cmd, cmd.Start)
}

// StartWith is Start with start run in place of cmd.Start: for example
// cmd.Start called from a thread inside another network namespace.
func StartWith(tb testing.TB, name string, cmd *exec.Cmd, start func() error) *Proc {
	tb.Helper()
	pr := &Proc{Name: name, Cmd: cmd, tb: tb, done: make(chan struct{}), code: -1}
	raced := func() bool { return false }
	if cmd.Stdout == nil && cmd.Stderr == nil {
		pr.Out = &Buffer{}
		cmd.Stdout, cmd.Stderr = pr.Out, pr.Out
		// Watched from the first byte: a race reported where Out later
		// cuts its output still fails the test.
		raced, _, _ = pr.Out.watch(raceReport)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// A descendant outside the killed group that still holds the output
	// pipe must not hold Wait, and so Kill and the test's cleanup, forever.
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	cmd.SysProcAttr.Setpgid = true
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if Race && !slices.ContainsFunc(cmd.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GORACE=") }) {
		// A race-instrumented binary otherwise sleeps a second at
		// exit, which every exit a test waits for would pay.
		cmd.Env = append(cmd.Environ(), "GORACE=atexit_sleep_ms=0")
	}
	if err := start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() {
		cmd.Wait()
		pr.ended = time.Now()
		pr.state = cmd.ProcessState
		pr.code = ExitCode(cmd.ProcessState)
		close(pr.done)
	}()
	tb.Cleanup(func() {
		pr.Kill()
		if pr.Out == nil {
			return
		}
		out := pr.Out.String()
		if raced() {
			tb.Errorf("%s reported a data race:\n%s", name, out)
		} else if tb.Failed() {
			tb.Logf("--- %s output:\n%s", name, out)
		} else if n := pr.Out.Cut(); n > 0 {
			tb.Logf("%s wrote more than proctest keeps: %d bytes of its output were cut", name, n)
		}
	})
	return pr
}

// ExitCode is the code a shell would report for ps, as the reaper reads it:
// the exit code, or 128+N for death by signal N.
func ExitCode(ps *os.ProcessState) int {
	return reaper.Exit{Status: unix.WaitStatus(ps.Sys().(syscall.WaitStatus))}.Code()
}

// Pid is the process's id, also its process group's.
func (pr *Proc) Pid() int { return pr.Cmd.Process.Pid }

// Done is closed once the process has ended and been waited for.
func (pr *Proc) Done() <-chan struct{} { return pr.done }

// Exited reports whether the process has ended.
func (pr *Proc) Exited() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

// Code is the exit code (128+N for signal N), or -1 while it runs.
func (pr *Proc) Code() int {
	if !pr.Exited() {
		return -1
	}
	return pr.code
}

// Status is how the process ended; zero while it runs.
func (pr *Proc) Status() syscall.WaitStatus {
	if !pr.Exited() {
		return 0
	}
	return pr.state.Sys().(syscall.WaitStatus)
}

// Ended is when the process was seen to end; zero while it runs.
func (pr *Proc) Ended() time.Time {
	if !pr.Exited() {
		return time.Time{}
	}
	return pr.ended
}

// Wait reports whether the process ended within d. An end already seen
// wins over a d of zero: a select of two ready cases picks either.
func (pr *Proc) Wait(d time.Duration) bool {
	if pr.Exited() {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-pr.done:
		return true
	case <-t.C:
		return false
	}
}

// Exit waits up to d for the process to end and returns its code; the test
// fails if it does not end.
func (pr *Proc) Exit(d time.Duration) int {
	pr.tb.Helper()
	if !pr.Wait(d) {
		pr.tb.Fatalf("%s still running after %v%s", pr.Name, d, pr.output())
	}
	return pr.code
}

// Signal sends sig to the process (not its group); the test fails if it
// cannot.
func (pr *Proc) Signal(sig syscall.Signal) {
	pr.tb.Helper()
	if err := pr.Cmd.Process.Signal(sig); err != nil {
		pr.tb.Fatalf("signal %s %v: %v", pr.Name, sig, err)
	}
}

// Kill kills the process's group (a PID 1 takes its PID namespace with it)
// unless the process has ended, and waits for it.
func (pr *Proc) Kill() {
	if pr.Exited() {
		return
	}
	syscall.Kill(-pr.Pid(), syscall.SIGKILL)
	<-pr.done
}

// WaitLog waits up to d until the output holds s; the test fails if it does
// not, or if the process ends without it. The output is Out: WaitLog is for
// a process whose stdout and stderr Start captured.
func (pr *Proc) WaitLog(s string, d time.Duration) {
	pr.tb.Helper()
	if pr.Out == nil {
		pr.tb.Fatalf("%s: WaitLog on output the test redirected itself", pr.Name)
	}
	// Watched as it is written, not searched for in Out: a line that
	// comes while the test waits is seen even where Out cuts it.
	has, cutBefore, stop := pr.Out.watch(s)
	defer stop()
	// Once the process has been waited for, its output has all been
	// copied: the last look sees everything it wrote.
	if Until(d, func() bool { return has() || pr.Exited() }) && has() {
		return
	}
	cut := ""
	if cutBefore > 0 {
		cut = fmt.Sprintf(" (%d bytes of its output were cut before the wait, which may have held it)", cutBefore)
	}
	if pr.Exited() {
		pr.tb.Fatalf("%s exited (code %d) without logging %q%s%s", pr.Name, pr.code, s, cut, pr.output())
	}
	pr.tb.Fatalf("%s never logged %q within %v%s%s", pr.Name, s, d, cut, pr.output())
}

// raceReport starts the race detector's report of a data race.
const raceReport = "WARNING: DATA RACE"

// output is the output for a failure message, when it is not logged at
// cleanup anyway.
func (pr *Proc) output() string {
	if pr.Out == nil {
		return ""
	}
	return ":\n" + pr.Out.String()
}

// Zombies lists the children of ppid that have exited and are not reaped.
func Zombies(ppid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(ppid) {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			out = append(out, pid)
		}
	}
	return out
}

// Piped starts cmd, a helper process that talks to its test over its
// standard streams, and returns a pipe to its stdin and one from its stdout.
// The caller waits for it.
func Piped(tb testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	tb.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err = cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return stdin, stdout
}
