// Package proxy runs the proxy (Envoy, or pilot-agent and the Envoy it runs)
// as a child in a process group of its own, and owns its end: the stop
// sequence that makes it exit, and the exit status that says how it ended.
//
// Where the proxy is in its life (starting, ready, stopping, exited) is the
// supervisor's lifecycle to say; a Process keeps only what its stop needs:
// whether a stop was asked for already, so that the sequence runs once, and
// whether the proxy has exited.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
)

// Config is how to run the proxy and how to stop it.
type Config struct {
	Command []string // the proxy and its arguments
	// Quit asks the proxy to exit by itself: Envoy's POST /quitquitquit,
	// which makes Envoy exit at once and pilot-agent follow without a drain
	// of its own. It is bounded by the context it is given.
	Quit func(ctx context.Context) error
	// QuitGrace is how long Quit gets before SIGTERM to the group.
	QuitGrace time.Duration
	// StopTimeout is from the stop request to SIGKILL of the group.
	StopTimeout time.Duration
	// Escalated, if set, is told of every signal the stop sequence sends.
	Escalated func(syscall.Signal)
	// Clock times the stop sequence; nil means the system's.
	Clock clock.Clock
	Log   *slog.Logger
}

// Process is the proxy: made by New, forked by Start. Its methods are safe
// for concurrent use; all but Start are for a started proxy.
type Process struct {
	cfg    Config
	reaper *reaper.Reaper

	mu      sync.Mutex
	pid     int                // 0 until Start has forked it
	exit    <-chan reaper.Exit // set with pid
	stopped bool               // a stop (or a kill) was asked for: the sequence is not started again
	exited  chan struct{}      // closed, under mu, once Wait has the exit
}

// StartError is a proxy that could not be started, with the code a shell
// would exit with: 127 when it is not found, 126 when it cannot be executed.
type StartError struct {
	Err  error
	Code int
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// New prepares the proxy, to be started through r, the only owner of
// wait4. It forks nothing.
func New(r *reaper.Reaper, cfg Config) *Process {
	cfg.Clock = clock.Or(cfg.Clock)
	return &Process{cfg: cfg, reaper: r, exited: make(chan struct{})}
}

// Start forks the proxy, once, in its own process group: a stop then
// reaches pilot-agent and the Envoy it runs together, and nothing else.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid != 0 {
		return errors.New("start proxy: started already")
	}
	if len(p.cfg.Command) == 0 {
		return &StartError{Err: errors.New("start proxy: no command"), Code: 127}
	}
	// Stdin is /dev/null, as os/exec would make it: a closed fd 0 would be
	// the first file the proxy opens. Stdout and stderr are the
	// supervisor's own, never pipes: a pipe would need a copying goroutine,
	// and a supervisor that stalls would stall the proxy's logging.
	null, err := os.Open(os.DevNull)
	if err != nil {
		return &StartError{Err: fmt.Errorf("start proxy: %w", err), Code: 126}
	}
	defer null.Close()
	pid, exit, err := p.reaper.Start(p.cfg.Command, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{null.Fd(), os.Stdout.Fd(), os.Stderr.Fd()},
		// Pdeathsig: if the supervisor itself dies (an OOM kill, a SIGKILL
		// from outside while not PID 1), the proxy must not live on
		// unsupervised.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return &StartError{Err: fmt.Errorf("start proxy: %w", err), Code: reaper.StartCode(err)}
	}
	p.pid, p.exit = pid, exit
	return nil
}

// Pid is the proxy's pid, which is also its process group's id; 0 before
// Start.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Wait blocks until the group's leader has exited and returns how. Call
// it once, and KillLeftovers after it. Until then, what the leader left in its
// group still runs: what runs then (an Envoy under a pilot-agent that
// exited) outlived the leader, and what is gone died first.
func (p *Process) Wait() reaper.Exit {
	p.mu.Lock()
	exit := p.exit
	p.mu.Unlock()
	e := <-exit
	p.mu.Lock()
	close(p.exited)
	p.mu.Unlock()
	return e
}

// KillLeftovers kills whatever the leader left behind in its group, so that
// nothing of the proxy outlives it.
func (p *Process) KillLeftovers() { p.signal(syscall.SIGKILL) }

// Exited is closed once the proxy has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop starts the stop sequence in the background, unless one was started
// already or the proxy has exited, and reports whether it started one.
//
// The sequence: Quit, then SIGTERM to the group once QuitGrace has passed
// (a proxy whose admin API is gone), then SIGKILL at StopTimeout (a proxy
// that hangs).
//
// Why it stops is the caller's to log.
func (p *Process) Stop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 || p.stopped || isClosed(p.exited) {
		return false
	}
	p.stopped = true
	go p.stop()
	return true
}

// StopLeft runs the stop sequence against what the leader left in its
// group once it has exited by itself (an Envoy whose pilot-agent died,
// reparented to the supervisor), each step until gone, which Remains
// gave, is closed; it returns then, or once SIGKILL is sent.
func (p *Process) StopLeft(gone <-chan struct{}) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.sequence(gone)
}

// Remains watches what the leader left in its group, once Wait has
// returned: the channel is closed once no process of the group is left.
// The group is looked at after each orphan the reaper reaps, and every
// remainsCheck besides.
func (p *Process) Remains() <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		t := time.NewTicker(remainsCheck)
		defer t.Stop()
		for p.groupAlive() {
			select {
			case <-p.reaper.OrphanReaped():
			case <-t.C:
			}
		}
	}()
	return gone
}

// remainsCheck backs the reaper's word up, as its own sweep backs SIGCHLD.
const remainsCheck = time.Second

// groupAlive reports whether a process of the group is left, a zombie not
// yet reaped included. EPERM (a member of another uid) is one left.
func (p *Process) groupAlive() bool {
	pid := p.Pid()
	return pid > 0 && !errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH)
}

func (p *Process) stop() { p.sequence(p.exited) }

// sequence is the stop: Quit, SIGTERM to the group at QuitGrace, SIGKILL
// at StopTimeout, each only while gone is open.
func (p *Process) sequence(gone <-chan struct{}) {
	clk := p.cfg.Clock
	start := clk.Now()
	deadline := start.Add(p.cfg.StopTimeout)
	quitBy := start.Add(min(p.cfg.QuitGrace, p.cfg.StopTimeout))
	if p.cfg.Quit != nil {
		ctx, cancel := clock.WithTimeout(context.Background(), clk, quitBy.Sub(start))
		err := p.cfg.Quit(ctx)
		cancel()
		if err != nil {
			p.cfg.Log.Info("the proxy's quit request failed; signalling instead", "err", err)
		}
	}
	if p.goneBy(gone, quitBy) {
		return
	}
	p.cfg.Log.Info("escalated to SIGTERM", "pgid", p.Pid())
	p.escalate(syscall.SIGTERM)
	if p.goneBy(gone, deadline) {
		return
	}
	p.cfg.Log.Warn("escalated to SIGKILL", "pgid", p.Pid(), "stop_timeout", p.cfg.StopTimeout)
	p.escalate(syscall.SIGKILL)
}

func (p *Process) escalate(sig syscall.Signal) {
	if p.cfg.Escalated != nil {
		p.cfg.Escalated(sig)
	}
	p.signal(sig)
}

// Kill kills the proxy's group at once, whatever stop is under way; no stop
// sequence starts after it. A proxy never forked is left as it is.
func (p *Process) Kill() {
	p.mu.Lock()
	if p.pid == 0 {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	p.mu.Unlock()
	p.signal(syscall.SIGKILL)
}

// Signal sends sig to the proxy's group: Envoy under pilot-agent is in the
// group too, and pilot-agent itself forwards nothing.
func (p *Process) Signal(sig syscall.Signal) { p.signal(sig) }

// signal signals the group. A group that is gone is not an error: the proxy
// may exit between any two steps.
func (p *Process) signal(sig syscall.Signal) {
	pid := p.Pid()
	if pid <= 0 {
		return // not started; kill(0) or kill(-1) would signal ourselves or everyone
	}
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.cfg.Log.Warn("signal proxy group", "pgid", pid, "signal", sig, "err", err)
	}
}

// goneBy reports whether gone is closed by the instant at, on the clock.
func (p *Process) goneBy(gone <-chan struct{}, at time.Time) bool {
	d := at.Sub(p.cfg.Clock.Now())
	if d <= 0 {
		return isClosed(gone)
	}
	t := p.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-gone:
		return true
	case <-t.C():
		return isClosed(gone)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
