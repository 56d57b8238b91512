// Package reaper owns wait4 for the whole process: it is the only code that waits
// on children.
//
// A supervisor that runs as PID 1 (or as a child subreaper) inherits every orphan
// in its PID namespace and must reap them, but a reaper loop calling wait4(-1)
// steals the exit status of children that other code is waiting for; Go's
// os.Process.Wait then fails with "no child processes". The fix, as in
// containerd's reaper, is a single owner of wait4:
//
//   - Start forks and execs a command and registers its pid under the same
//     lock, so the reaper cannot dispatch that pid's exit before someone is
//     listening.
//   - Run drains wait4(-1, WNOHANG) until it returns 0 or ECHILD on every
//     SIGCHLD, because SIGCHLD coalesces: one wait4 per signal leaves zombies.
//     A periodic sweep backs the signal up.
//   - Exits of registered children go to their channel; everything else is an
//     orphan, counted and forgotten.
//
// Callers must never wait on a pid started here (wait4, os.Process.Wait):
// its exit is the reaper's to deliver.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Sweep is how often Run drains without a SIGCHLD. It only backs the signal up:
// a signal can be lost to coalescing only if a drain misses an exit, which the
// loop's structure prevents, but a bound costs nothing.
const Sweep = time.Second

// Exit is how a child ended.
type Exit struct {
	Pid    int
	Status unix.WaitStatus
}

// Code maps the status the way shells and the kubelet do: the exit code, or
// 128+N for death by signal N.
func (e Exit) Code() int {
	if e.Status.Signaled() {
		return 128 + int(e.Status.Signal())
	}
	return e.Status.ExitStatus()
}

func (e Exit) String() string {
	if e.Status.Signaled() {
		return fmt.Sprintf("killed by %s (code %d)", unix.SignalName(e.Status.Signal()), e.Code())
	}
	return fmt.Sprintf("exited with code %d", e.Code())
}

// StartCode is the exit code a shell gives a command that could not be
// started: 127 when it does not exist, 126 when it cannot be executed.
func StartCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return 127
	}
	return 126
}

// Reaper dispatches child exits. The zero value is not usable; call New.
type Reaper struct {
	mu      sync.Mutex
	waiters map[int]chan Exit
	orphans atomic.Uint64
	orphan  chan struct{} // a token once an orphan was reaped, for OrphanReaped
	notify  chan os.Signal
}

// New subscribes to SIGCHLD at once, so that no exit between New and Run goes
// unnoticed. Unless the process is PID 1 it also becomes a child subreaper, so
// the orphans of its children come back to it instead of to the real init (as
// under shareProcessNamespace, where pause is PID 1).
func New() (*Reaper, error) {
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("become child subreaper: %w", err)
		}
	}
	r := &Reaper{waiters: make(map[int]chan Exit), orphan: make(chan struct{}, 1), notify: make(chan os.Signal, 1)}
	// Never signal.Ignore(SIGCHLD): the kernel would then reap on its own and
	// every status would be lost.
	signal.Notify(r.notify, unix.SIGCHLD)
	return r, nil
}

// Start runs argv with attr and returns its pid and the channel that
// receives its exit. argv[0] is looked up in PATH, as a shell would, when it
// names no directory. attr is syscall's: a nil Env is an empty environment.
// Its errors name the command; StartCode gives a shell's code for them.
//
// It forks with syscall.ForkExec, not os/exec: os/exec's first start forks a
// throwaway child to probe for pidfd support (0.15-0.25 ms of every start),
// for pidfds that the reaper does not use, and its pipes and context
// plumbing, which nothing here uses, are 45 KB of a binary copied into
// every pod.
func (r *Reaper) Start(argv []string, attr *syscall.ProcAttr) (pid int, exit <-chan Exit, err error) {
	if len(argv) == 0 {
		return 0, nil, &exec.Error{Name: "", Err: exec.ErrNotFound}
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return 0, nil, err
		}
	}
	exit, err = r.spawn(func() (int, error) {
		pid, err = syscall.ForkExec(path, argv, attr)
		return pid, err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", argv[0], err)
	}
	return pid, exit, nil
}

// spawn registers the process that start forks, and whose pid it returns.
// Holding the lock across the fork and the registration is what makes an
// early exit safe: the loop may reap the pid at once, but it cannot dispatch
// it until the pid is known.
func (r *Reaper) spawn(start func() (pid int, err error)) (<-chan Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return nil, err
	}
	ch := make(chan Exit, 1)
	r.waiters[pid] = ch
	return ch, nil
}

// Stop ends the SIGCHLD subscription of a reaper that will not Run, or has
// run. A second Stop is harmless.
func (r *Reaper) Stop() { signal.Stop(r.notify) }

// Orphans is how many exits of unregistered processes have been reaped.
func (r *Reaper) Orphans() uint64 { return r.orphans.Load() }

// OrphanReaped receives after an orphan has been reaped: a token, not a
// count, for one reader that then looks at what it waits for (an Envoy
// whose pilot-agent died is such an orphan).
func (r *Reaper) OrphanReaped() <-chan struct{} { return r.orphan }

// Run reaps until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	defer signal.Stop(r.notify)
	t := time.NewTicker(Sweep)
	defer t.Stop()
	for {
		r.Reap()
		select {
		case <-ctx.Done():
			return nil
		case <-r.notify:
		case <-t.C:
		}
	}
}

// Reap drains every exited child now and returns how many it reaped.
func (r *Reaper) Reap() int {
	n := 0
	for {
		var ws unix.WaitStatus
		// No WALL or WCLONE: those would also take the clone children the Go
		// runtime waits for itself.
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return n // ECHILD: no children at all; 0: none has exited
		}
		if !ws.Exited() && !ws.Signaled() {
			continue // stopped or continued; without WUNTRACED this does not happen
		}
		n++
		r.dispatch(Exit{Pid: pid, Status: ws})
	}
}

func (r *Reaper) dispatch(e Exit) {
	r.mu.Lock()
	ch, ok := r.waiters[e.Pid]
	delete(r.waiters, e.Pid)
	r.mu.Unlock()
	if !ok {
		r.orphans.Add(1)
		select {
		case r.orphan <- struct{}{}:
		default: // a token is waiting already
		}
		return
	}
	ch <- e // buffered, one send per registration
}
