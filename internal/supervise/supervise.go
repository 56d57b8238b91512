// Package supervise wires the supervisor together: the proxy child, the
// readiness tracker, the completion book, the drain, the control socket and
// the health server, run as an oklog/run group of actors around the
// lifecycle that it owns.
//
// The group lives exactly as long as the proxy. Every way out (a signal, the
// app's completion, the failure of an actor) is an event for the termination
// actor, which alone stops the proxy, and whose return at the proxy's exit
// ends the group. The reaper is not in the group: it outlives it, so that
// the proxy's exit is always delivered. The exit code is fixed by the first
// decisive event (see decision.take), not by the last.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/oklog/run"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/completion"
	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/health"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
	"github.com/proxy-supervisor/proxy-supervisor/internal/proxy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
)

// Config is everything the supervisor is told.
type Config struct {
	Command []string // the proxy and its arguments

	AdminURL    http1.URL // Envoy's admin API
	StrictReady bool      // also require CDS, LDS and started workers
	ExtraReady  http1.URL // also require its 200 (pilot-agent's readiness); zero: none
	HealthAddr  string    // HOST:PORT of the health server; "" disables it
	ControlDir  string    // the shared emptyDir: the control socket and peers/
	AllowedUIDs []uint32

	Policy peers.Policy // Policy.Native is --native-sidecar

	QuitGrace   time.Duration // after /quitquitquit, before SIGTERM to the group
	StopTimeout time.Duration // from the stop request to SIGKILL

	DrainMin             time.Duration
	DrainTimeout         time.Duration
	DrainDelay           time.Duration // from the drain's start to its close hints
	DrainInboundOnly     bool
	DrainHealthcheckFail bool
	// DrainReadyUntilHints keeps /healthz/ready as before the drain until
	// its close hints have gone out or it has ended, not only until it
	// starts (--drain-ready-until-hints).
	DrainReadyUntilHints bool
	// ProxyUID owns the proxy's listening sockets (1337 under Istio); -1:
	// none. With AppPorts, the admin port and the health port, it tells the
	// app's ports and connections from the proxy's.
	ProxyUID int
	AppPorts []uint16 // the app's ports alone, when given

	FailOnEnvoyDeath bool // exit 1 when the child exits 0 unasked (pilot-agent after Envoy's death)

	// DeletionWindow is how long a peer's death by a SIGTERM that exec did
	// not forward waits for the preStop or SIGTERM of a pod deletion; zero
	// means DefaultDeletionWindow.
	DeletionWindow time.Duration
	// GracePeriod is the pod's terminationGracePeriodSeconds
	// (--grace-period); zero means Kubernetes' default,
	// DefaultGracePeriod. A peer stopped from outside waits for the
	// deletion within it (deletionWait).
	GracePeriod time.Duration
	// HungAfter: /healthz/live fails once a proxy that was ready has not
	// answered its admin API for this long; zero keeps it live.
	HungAfter time.Duration
	// TerminationLog is the file the exit's one-line summary replaces
	// (the container's terminationMessagePath); "" writes none.
	TerminationLog string

	// Signals are the subscriptions the command made first thing
	// (Subscribe), so that no signal of its start meets Go's default, and
	// which it ends (or never ends, in a process that exits after Run); nil:
	// Run subscribes, and ends its own when it returns.
	Signals *Signals

	// Build is the binary's, for the proxy_supervisor_build_info metric.
	Build Build

	Intervals Intervals
	// Clock times the termination: its windows and bounds, the drain and
	// the proxy's stop sequence; nil means the system's.
	Clock clock.Clock
	Log   *slog.Logger
}

// Build names the binary that runs: its version, the commit it was built
// from, its build date (RFC 3339, UTC) and the Go release that built it.
type Build struct{ Version, Commit, Date, GoVersion string }

// Intervals pace the supervisor's polls. Zero fields mean the defaults,
// which suit production; tests shorten them so as not to wait on the clock.
type Intervals struct {
	TrackerStart, TrackerReady time.Duration // envoy.DefaultStartEvery, DefaultReadyEvery
	Rescan                     time.Duration // completion.DefaultRescan
	DrainTick, DrainStats      time.Duration // drain.DefaultTick, DefaultStatsEvery
	DrainProgress              time.Duration // drain.DefaultProgress
	DrainQuiet                 time.Duration // drain.DefaultQuiet
}

// Supervisor runs one proxy. Use New, then Run once.
type Supervisor struct {
	cfg     Config
	admin   *envoy.Admin
	owner   portwatch.Owner
	log     *slog.Logger
	life    *lifecycle
	tracker *envoy.Tracker
	scanner *portwatch.Scanner
	m       *meters
	start   time.Time

	reaper *reaper.Reaper
	book   *completion.Book // opened by Run
	proc   *proxy.Process   // forked by Run
	sock   *control.Server  // bound by Run
	health *health.Server   // bound by Run; nil: no health server

	termEvents chan *termEvent // to the termination actor
	terminated chan struct{}   // closed when the termination actor returns
	term       termination     // the termination actor's own

	envoyPorts atomic.Pointer[[]uint16]   // Envoy's listeners, learned when it is ready
	drainCall  atomic.Pointer[drain.Call] // chosen for Envoy's release, learned when it is ready
}

// New checks cfg and builds every part of the supervisor: the clients of
// Envoy's admin API and of the extra readiness URL, the control socket's
// and the health port's servers, the proxy. It touches neither the
// filesystem nor the network: Run opens the completion records and binds
// the sockets (open). Of the world outside it takes only SIGCHLD: it
// becomes the reaper of the proxy's orphans. Run must follow, once, for
// that to be given back.
func New(cfg Config) (*Supervisor, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("no proxy command given")
	}
	if cfg.AdminURL.Network == "" {
		return nil, errors.New("no admin API given")
	}
	if cfg.DeletionWindow <= 0 {
		cfg.DeletionWindow = DefaultDeletionWindow
	}
	cfg.GracePeriod = Bounds{GracePeriod: cfg.GracePeriod}.DeletionGrace()
	cfg.Clock = clock.Or(cfg.Clock)
	s := &Supervisor{
		cfg:        cfg,
		admin:      envoy.NewAdmin(cfg.AdminURL),
		log:        cfg.Log,
		scanner:    portwatch.NewScanner(cfg.Log),
		start:      cfg.Clock.Now(),
		termEvents: make(chan *termEvent),
		terminated: make(chan struct{}),
	}
	s.owner = portwatch.Owner{AdminPort: s.admin.Port(), HealthPort: portOf(cfg.HealthAddr), ProxyUID: cfg.ProxyUID, AppPorts: cfg.AppPorts}
	s.term = termination{Supervisor: s, clk: cfg.Clock}
	s.m = newMeters(s)
	s.life = newLifecycle(cfg.Log, cfg.Clock, s.m.setPhase)
	var extraReady func(context.Context) string
	if cfg.ExtraReady.Network != "" {
		extraReady = envoy.NewReadyURL(cfg.ExtraReady).Check
	}
	s.tracker = envoy.NewTracker(s.admin, envoy.TrackerConfig{
		Strict:     cfg.StrictReady,
		ExtraReady: extraReady,
		StartEvery: cfg.Intervals.TrackerStart,
		ReadyEvery: cfg.Intervals.TrackerReady,
		Silence:    cfg.HungAfter, // liveness waits that long for an answer
		Keep:       true,          // every change, for followReadiness
	})
	s.sock = control.New(cfg.ControlDir, s, cfg.AllowedUIDs, s.log)
	if cfg.HealthAddr != "" {
		s.health = health.New(cfg.HealthAddr, s.healthReady, s.healthLive, s.m.reg, s.log)
	}
	var err error
	if s.reaper, err = reaper.New(); err != nil {
		return nil, err
	}
	s.proc = proxy.New(s.reaper, proxy.Config{
		Command:     cfg.Command,
		Quit:        func(ctx context.Context) error { return s.admin.Post(ctx, "/quitquitquit") },
		QuitGrace:   cfg.QuitGrace,
		StopTimeout: cfg.StopTimeout,
		Escalated:   s.m.escalated,
		Clock:       cfg.Clock,
		Log:         cfg.Log,
	})
	return s, nil
}

// portOf is the port of a listen address such as :15022; 0 for none.
func portOf(addr string) uint16 {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(p, 10, 16)
	return uint16(n)
}

// Run supervises until the proxy has exited and returns the exit code. It
// opens the completion records first, and returns at once, without
// binding or starting anything more, when they already settle the job. Its
// last act is the lifecycle summary in the termination message file.
func (s *Supervisor) Run() (int, error) {
	// Signals are subscribed before anything that takes time, and stay
	// subscribed while the summary is written: a signal with no
	// subscription gets Go's default action, which for SIGTERM is to exit
	// at once (2 in PID 1) and, once the proxy is forked, to leave it
	// unsupervised. Subscriptions given in Config are the caller's to end.
	sigs := s.cfg.Signals
	if sigs == nil {
		sigs = Subscribe()
		defer sigs.Stop()
	}
	code, err := s.run(sigs)
	s.writeSummary(code, err)
	return code, err
}

// run is the proxy's life in the pod: the records first, then the sockets,
// the fork, and the actors until the proxy has exited.
func (s *Supervisor) run(sigs *Signals) (int, error) {
	// The SIGCHLD subscription of a reaper that never ran, when no proxy
	// was forked, is given back on every way out; twice is harmless.
	defer s.reaper.Stop()
	if err := s.openRecords(); err != nil {
		return 1, err
	}
	// The watching actor closes the book too; twice is harmless.
	defer s.book.Close()
	// A Job whose app finished before this container (re)started must end
	// now, without a proxy.
	if v := s.book.Load("start"); v.Done {
		s.life.record(Event{Kind: PeersSettled, Code: v.Code, Peer: v.Failed})
		code, _, _ := s.life.exitCode()
		s.log.Info("completion records settle the job; not starting the proxy", "exit_code", code)
		return code, nil
	}
	if err := s.listen(); err != nil {
		return 1, err
	}
	if code, stopped := s.stopSignalBeforeFork(sigs); stopped {
		s.closeSockets()
		return code, nil
	}
	if err := s.proc.Start(); err != nil {
		s.closeSockets()
		var se *proxy.StartError
		errors.As(err, &se)
		s.life.record(Event{Kind: StartFailed, Code: se.Code})
		code, _, _ := s.life.exitCode()
		return code, err
	}
	s.log.Info("proxy started", "pid", s.proc.Pid(), "command", s.cfg.Command)

	stopReaper := s.reap()
	err := s.serve(sigs, s.sock, s.health)
	stopReaper()
	code, _, _ := s.life.exitCode()
	return code, err
}

// openRecords creates the completion records' directory, if need be, and
// watches it, so that no record written from then on goes unseen.
func (s *Supervisor) openRecords() error {
	var err error
	s.book, err = completion.Open(completion.Config{
		Records:     peers.Open(s.cfg.ControlDir),
		Policy:      s.cfg.Policy,
		AllowedUIDs: s.cfg.AllowedUIDs,
		Rescan:      s.cfg.Intervals.Rescan,
		Recorded:    s.m.recorded,
		Clock:       s.cfg.Clock,
		Log:         s.log,
	})
	return err
}

// listen binds the control socket and the health server.
func (s *Supervisor) listen() error {
	if err := s.sock.Listen(); err != nil {
		return err
	}
	if s.health == nil {
		return nil
	}
	if err := s.health.Listen(); err != nil {
		s.sock.Close()
		return err
	}
	return nil
}

// closeSockets closes what listen bound, when the proxy never ran.
func (s *Supervisor) closeSockets() {
	s.sock.Close()
	if s.health != nil {
		s.health.Close()
	}
}

// reap runs the reaper until the returned function is called, which waits
// for it to end. It runs outside the group, because the group's end must not
// end it: the proxy's exit would then never be delivered.
func (s *Supervisor) reap() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.reaper.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// serve runs the actors until the proxy has exited. Each actor has its own
// context, so interrupting one ends that one alone.
func (s *Supervisor) serve(sigs *Signals, sock *control.Server, hs *health.Server) error {
	// oklog/run returns only the first actor's error; the others, from
	// actors stopping concurrently, are collected too, so that none is lost.
	var (
		mu   sync.Mutex
		errs *multierror.Error
		g    run.Group
	)
	add := func(name string, execute func() error, interrupt func(error)) {
		g.Add(func() error {
			err := execute()
			if err != nil {
				s.life.record(Event{Kind: ActorFailed, Actor: name})
				mu.Lock()
				errs = multierror.Append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
			return err
		}, interrupt)
	}

	// Another actor ended first: the proxy stops, or what its leader left
	// (leaderExited) does. Once the proxy has exited, nothing is asked.
	add("proxy", s.term.loop, func(error) { s.toTermination(&termEvent{shutdown: true}) })
	for _, a := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"signals", func(ctx context.Context) error { return s.handleSignals(ctx, sigs) }},
		{"tracker", s.tracker.Run},
		{"readiness", func(ctx context.Context) error { return s.followReadiness(ctx, sock) }},
		{"records", s.book.KeepCurrent},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		add(a.name, func() error { return a.run(ctx) }, func(error) { cancel() })
	}
	add("control socket", sock.Serve, func(error) { sock.Close() })
	if hs != nil {
		add("health server", hs.Serve, func(error) { hs.Close() })
	}
	// Learning what a drain needs is one-shot work, not an actor: its end
	// must not end the group.
	ctx, cancel := context.WithCancel(context.Background())
	learned := make(chan struct{})
	go func() {
		defer close(learned)
		s.learnAtReady(ctx)
	}()
	g.Run()
	cancel()
	<-learned
	return errs.ErrorOrNil()
}

// envoyProbeMax bounds the look at the admin port when the proxy exits. A
// loopback connect is answered at once; an admin API elsewhere gets no more
// than this.
const envoyProbeMax = 50 * time.Millisecond

// checkEnvoyAtExit runs when the proxy's leader has exited, before what it
// left in its group is killed. pilot-agent exits 0 within milliseconds of
// Envoy's death, well inside the tracker's poll of a ready proxy, so the
// tracker has usually not seen the admin port refuse: a port that refuses
// now says Envoy died first, and the exit is logged as its death. It
// reports whether the admin port is still bound: an Envoy outlived the
// leader.
func (s *Supervisor) checkEnvoyAtExit() (envoyUp bool) {
	if s.life.everReady() {
		ctx, cancel := clock.WithTimeout(context.Background(), s.cfg.Clock, envoyProbeMax)
		defer cancel()
		bound, err := s.admin.Listening(ctx)
		if err == nil && !bound {
			s.life.noteEnvoyDown(s.cfg.Clock.Now())
		}
		envoyUp = err == nil && bound
	}
	return envoyUp
}
