// Package supervise owns the proxy's lifecycle: it runs the proxy as a child
// and, around it, an oklog/run group of actors (the reaper, signals, the
// readiness tracker, the health server, the control socket and the completion
// records), and it decides the supervisor's exit code.
//
// The group lives exactly as long as the proxy. Every way out (a signal, the
// app's completion, an actor's failure) asks the proxy to stop; the proxy's
// exit then ends the group. The exit code is fixed by the first decisive event,
// not by the last: once every peer has succeeded, a proxy that crashes while it
// stops still leaves 0.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/oklog/run"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/health"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
)

// Config is everything the supervisor is told.
type Config struct {
	Command []string // the proxy and its arguments

	Admin       *health.Admin
	StrictReady bool   // also require CDS, LDS and started workers
	HealthAddr  string // "" disables the health server
	ControlDir  string
	AllowedUIDs []uint32

	Policy peers.Policy // Policy.Native is --native-sidecar

	QuitGrace   time.Duration // after /quitquitquit, before SIGTERM to the group
	StopTimeout time.Duration // from the stop request to SIGKILL

	DrainMin             time.Duration
	DrainTimeout         time.Duration
	DrainInboundOnly     bool
	DrainHealthcheckFail bool
	Owner                portwatch.Owner // tells the app's listening sockets from the proxy's

	FailOnEnvoyDeath bool // exit 1 when the child exits 0 unasked (pilot-agent after Envoy's death)

	Log *slog.Logger
}

// Supervisor runs one proxy. Use New, then Run once.
type Supervisor struct {
	cfg     Config
	log     *slog.Logger
	reaper  *reaper.Reaper
	tracker *health.Tracker
	records peers.Dir
	scanner *portwatch.Scanner
	m       *meters
	sigs    chan os.Signal
	start   time.Time

	out outcome

	recMu    sync.Mutex              // serializes reading the records into the book
	postedOK bool                    // the store of POSTed completions is usable; set before any actor runs
	posted   map[string]peers.Record // POSTed completions of this run, guarded by recMu

	mu          sync.Mutex
	pid         int
	envoyDied   time.Time // when a ready Envoy stopped answering, unasked
	stopping    bool
	stopReason  string
	terminating bool
	drain       *drain
	book        book     // what the completion records say
	envoyPorts  []uint16 // Envoy's listeners, learned when it is ready

	stopOnce sync.Once
	exited   chan struct{} // closed once the proxy has exited
}

// New checks cfg and prepares the supervisor; it starts nothing.
func New(cfg Config) (*Supervisor, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("no proxy command given")
	}
	r, err := reaper.New()
	if err != nil {
		return nil, err
	}
	ignorePipe()
	s := &Supervisor{
		cfg:     cfg,
		log:     cfg.Log,
		reaper:  r,
		tracker: health.NewTracker(cfg.Admin, cfg.StrictReady),
		records: peers.Open(cfg.ControlDir),
		scanner: portwatch.NewScanner(cfg.Log),
		start:   time.Now(),
		exited:  make(chan struct{}),
		sigs:    notifySignals(),
		posted:  make(map[string]peers.Record),
	}
	s.m = newMeters(s)
	return s, nil
}

// StartError is a proxy that could not be started, with the code a shell
// would exit with: 127 when it is not found, 126 when it cannot be executed.
type StartError struct {
	Err  error
	Code int
}

func (e *StartError) Error() string { return e.Err.Error() }

// Run supervises until the proxy has exited and returns the exit code.
func (s *Supervisor) Run() (int, error) {
	// Completion records come first: a Job whose app finished before this
	// container (re)started must end now, without a proxy.
	if err := s.records.Create(); err != nil {
		return 1, fmt.Errorf("completion records: %w", err)
	}
	s.createPosted()
	if v := s.loadRecords("start"); v.Done {
		s.log.Info("completion records settle the job; not starting the proxy", "exit_code", v.Code)
		return v.Code, nil
	}

	sock, err := control.Listen(s.cfg.ControlDir, s, s.cfg.AllowedUIDs, s.log)
	if err != nil {
		return 1, err
	}
	var hs *health.Server
	if s.cfg.HealthAddr != "" {
		if hs, err = health.Listen(s.cfg.HealthAddr, s.healthReady, s.m.reg); err != nil {
			sock.Close()
			return 1, err
		}
	}

	exit, err := s.startProxy()
	if err != nil {
		sock.Close()
		if hs != nil {
			hs.Close()
		}
		return err.(*StartError).Code, err
	}

	// oklog/run returns only the first actor's error; the others, from actors
	// stopping concurrently, are collected too, so that none is lost.
	var (
		errMu sync.Mutex
		errs  *multierror.Error
	)
	var g run.Group
	add := func(name string, execute func() error, interrupt func(error)) {
		g.Add(func() error {
			err := execute()
			if err != nil {
				// A supervisor that lost a part of itself must not exit
				// 0 as if all went well.
				s.out.decide(1, name+" failed")
				errMu.Lock()
				errs = multierror.Append(errs, fmt.Errorf("%s: %w", name, err))
				errMu.Unlock()
			}
			return err
		}, interrupt)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	add("reaper", func() error { return s.reaper.Run(ctx) }, func(error) { cancel() })
	add("proxy", func() error { return s.waitProxy(exit) }, func(error) {
		if !s.waitExit(0) { // another actor ended first
			s.requestStop("shutting down")
		}
	})
	add("signals", func() error { return s.handleSignals(ctx) }, func(error) { cancel() })
	add("tracker", func() error { return s.tracker.Run(ctx) }, func(error) { cancel() })
	add("readiness", func() error { return s.watchReadiness(ctx) }, func(error) { cancel() })
	add("records", func() error { return s.watchRecords(ctx) }, func(error) { cancel() })
	add("control socket", sock.Serve, func(error) { sock.Close() })
	if hs != nil {
		add("health server", hs.Serve, func(error) { hs.Close() })
	}
	g.Run()

	code, _ := s.out.get()
	return code, errs.ErrorOrNil()
}

// startProxy starts the proxy in its own process group, so that a stop reaches
// pilot-agent and the Envoy it runs together, and nothing else.
func (s *Supervisor) startProxy() (<-chan reaper.Exit, error) {
	cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
	// Plain files, never pipes: a pipe would need a copying goroutine that
	// cmd.Wait ends, and nobody may call Wait here but the reaper.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	// Pdeathsig: if the supervisor itself dies (an OOM kill, a SIGKILL from
	// outside while not PID 1), the proxy must not live on unsupervised.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	exit, err := s.reaper.Start(cmd)
	if err != nil {
		return nil, startError(s.cfg.Command[0], err)
	}
	pid := cmd.Process.Pid
	s.mu.Lock()
	s.pid = pid
	s.mu.Unlock()
	cmd.Process.Release() // the reaper watches the pid; the pidfd is not needed
	s.log.Info("proxy started", "pid", pid, "command", s.cfg.Command)
	s.m.setState("starting")
	return exit, nil
}

func startError(name string, err error) *StartError {
	code := reaper.StartCode(err)
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return &StartError{Err: fmt.Errorf("start proxy: %w", err), Code: code}
}

// waitProxy is the actor whose end ends the group.
func (s *Supervisor) waitProxy(ch <-chan reaper.Exit) error {
	e := <-ch
	s.mu.Lock()
	pid, stopping, died := s.pid, s.stopping, s.envoyDied
	s.mu.Unlock()
	close(s.exited)
	s.tracker.Gone("proxy exited")
	s.m.exits.With(fmt.Sprint(e.Code())).Inc()
	s.m.setState("exited")
	// Whatever the leader left behind in its group (an Envoy whose
	// pilot-agent died) must not outlive it.
	s.signalGroup(pid, syscall.SIGKILL)

	code, why := e.Code(), "proxy exited by itself"
	if code == 0 && !stopping && s.cfg.FailOnEnvoyDeath {
		// pilot-agent exits 0 within milliseconds of Envoy's death, often
		// before a tracker poll could see the admin port refuse; an exit
		// nobody asked for is the failure this flag exists to report.
		code, why = 1, "proxy exited 0 unasked (--fail-on-envoy-death)"
	}
	s.out.decide(code, why)
	final, by := s.out.get()
	attrs := []any{"pid", pid, "status", e.String(), "code", e.Code(), "exit_code", final, "decided_by", by}
	if !died.IsZero() && !stopping {
		attrs = append(attrs, "envoy_died_at", died.Format(time.RFC3339Nano))
	}
	s.log.Info("proxy exited", attrs...)
	s.mu.Lock()
	settledAt := s.book.settledAt
	s.mu.Unlock()
	if !settledAt.IsZero() {
		s.m.completionTo.Set(time.Since(settledAt).Seconds())
	}
	return nil
}

// requestStop starts the stop sequence once; later requests only log.
func (s *Supervisor) requestStop(why string) {
	first := false
	s.stopOnce.Do(func() {
		first = true
		s.mu.Lock()
		s.stopping, s.stopReason = true, why
		s.mu.Unlock()
		go s.stopProxy(why)
	})
	if !first {
		s.log.Debug("stop already requested", "reason", why)
	}
}

// stopProxy asks the proxy to go, then makes it. /quitquitquit lets Envoy exit
// at once and pilot-agent follow without its own drain; SIGTERM to the group
// covers a proxy whose admin API is gone; SIGKILL covers one that hangs.
func (s *Supervisor) stopProxy(why string) {
	s.log.Info("stop requested", "reason", why)
	s.m.setState("stopping")
	deadline := time.Now().Add(s.cfg.StopTimeout)
	grace := min(s.cfg.QuitGrace, s.cfg.StopTimeout)

	quitAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	err := s.cfg.Admin.Post(ctx, "/quitquitquit")
	cancel()
	if err != nil {
		s.log.Info("admin /quitquitquit failed; signalling instead", "err", err)
	}
	if s.waitExit(time.Until(quitAt.Add(grace))) {
		return
	}
	pid := s.proxyPid()
	s.log.Info("escalated to SIGTERM", "pgid", pid)
	s.signalGroup(pid, syscall.SIGTERM)
	if s.waitExit(time.Until(deadline)) {
		return
	}
	s.log.Warn("escalated to SIGKILL", "pgid", pid, "stop_timeout", s.cfg.StopTimeout)
	s.m.sigkills.Inc()
	s.signalGroup(pid, syscall.SIGKILL)
}

// signalGroup signals the proxy's process group. A group that is already gone
// is not an error: the proxy may exit between any two steps.
func (s *Supervisor) signalGroup(pid int, sig syscall.Signal) {
	if pid <= 0 {
		return // kill(0) or kill(-1) would signal ourselves or everyone
	}
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Warn("signal proxy group", "pgid", pid, "signal", sig, "err", err)
	}
}

// requestStopNow kills the proxy's group without asking, whatever stop is
// already under way.
func (s *Supervisor) requestStopNow(why string) {
	s.mu.Lock()
	s.stopping, s.stopReason = true, why
	pid := s.pid
	s.mu.Unlock()
	s.log.Warn("killing the proxy's group at once", "reason", why, "pgid", pid)
	s.signalGroup(pid, syscall.SIGKILL)
}

func (s *Supervisor) waitExit(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.exited:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.exited:
		return true
	case <-t.C:
		return false
	}
}

func (s *Supervisor) proxyPid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// healthReady is what /healthz/ready answers: ready, and not draining or
// stopping, since a pod on its way out must leave the endpoints.
func (s *Supervisor) healthReady() (bool, string) {
	st, _ := s.tracker.Status()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopping:
		return false, "stopping: " + s.stopReason
	case s.drain != nil:
		return false, "draining"
	case !st.Ready:
		return false, st.Reason
	}
	return true, ""
}

// watchReadiness logs and counts every change the tracker publishes.
func (s *Supervisor) watchReadiness(ctx context.Context) error {
	was, seen := false, false
	for {
		st, changed := s.tracker.Status()
		if st.Ready != was {
			s.m.readyChanges.Inc()
			if st.Ready {
				s.m.ready.Set(1)
				if !seen {
					seen = true
					s.log.Info("proxy ready", "after", time.Since(s.start).Round(time.Millisecond))
					s.m.setState("ready")
					go s.learnEnvoyPorts(ctx)
				} else {
					s.log.Info("proxy ready again")
				}
			} else {
				s.m.ready.Set(0)
				s.mu.Lock()
				stopping := s.stopping
				if !stopping && s.envoyDied.IsZero() && st.Down {
					s.envoyDied = time.Now()
				}
				s.mu.Unlock()
				if stopping {
					s.log.Info("proxy no longer ready", "reason", st.Reason)
				} else {
					s.log.Warn("proxy not ready", "reason", st.Reason)
				}
			}
			was = st.Ready
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}
