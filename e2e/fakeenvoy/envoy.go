// Package fakeenvoy is a test double for Envoy as proxy-supervisor sees it. It owns the
// admin API as Envoy answers it, byte for byte (exact-path routing, 404 and 405 bodies,
// POST-only mutating endpoints, /ready's state names, /stats text with its filter and
// usedonly, /listeners as JSON, /drain_listeners' flags), the start-up
// phases (unbound port, bound but silent, PRE_INITIALIZING, INITIALIZING, LIVE), the drain
// manager and the stats that count real connections to its data listeners.
//
// It owns no process concerns: signals, exit codes and orphans belong to cmd/fake-envoy,
// which wraps this package into a process that a supervisor can run as its child.
package fakeenvoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// State mirrors Envoy's server.state gauge values.
type State int

// The values are Envoy's admin.v3.ServerInfo.State enum, so they are also what the
// server.state gauge reports.
const (
	Live            State = 0
	Draining        State = 1
	PreInitializing State = 2
	Initializing    State = 3
)

func (s State) String() string {
	switch s {
	case Live:
		return "LIVE"
	case Draining:
		return "DRAINING"
	case PreInitializing:
		return "PRE_INITIALIZING"
	case Initializing:
		return "INITIALIZING"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ParseState reads a state by its Envoy name, as /ready and /server_info print it.
func ParseState(name string) (State, error) {
	for _, s := range []State{Live, Draining, PreInitializing, Initializing} {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown server state %q", name)
}

// Listener is one data-plane listener.
type Listener struct {
	Name    string // e.g. "virtualInbound"; default "listener_<index>"
	Addr    string // "IP:port"; port 0 picks a free one at Start
	Inbound bool   // traffic_direction: INBOUND (matters for inboundonly)
	TCP     bool   // plain tcp_proxy; else an HTTP connection manager
	// CheckDrainClose is tcp_proxy's check_drain_close (EnvoyVersion's
	// tcpProxyChecksDrain): without it, or before 1.39, a drain tells a
	// tcp_proxy connection nothing, and it stays until a peer closes it.
	CheckDrainClose bool
	// DrainTimeout is the HTTP connection manager's drain_timeout, 5s when
	// zero, as in Envoy: the room the next release's proactive drain leaves
	// at the end of --drain-time-s (proactiveDrain).
	DrainTimeout time.Duration
	StatPrefix   string // for the http.<prefix>.downstream_cx_active duplicate of HTTP listeners; default derived from Name

	// Routes is an HTTP listener's route table, from a bootstrap's
	// route_config: a request goes to the first route that matches its
	// path, and one that matches none gets Envoy's 404. Nil: every request
	// gets a 200 from the listener itself.
	Routes []Route
	// Upstream is where a TCP listener forwards its connections ("IP:port");
	// "" echoes what the peer sends.
	Upstream string
}

// Options configure a fake Envoy. The zero value is an Envoy with no listeners that
// binds 127.0.0.1:15000 and goes LIVE at once.
type Options struct {
	AdminAddr        string // default "127.0.0.1:15000"
	AdminPipe        string // a unix socket's path (admin.address.pipe); replaces AdminAddr
	Listeners        []Listener
	BindDelay        time.Duration // admin port not bound yet for this long
	SilentFor        time.Duration // after binding, connections are accepted but never answered for this long (Envoy binds before its loop runs)
	InitDelay        time.Duration // PRE_INITIALIZING for InitDelay/2, INITIALIZING for the rest, then LIVE; 0 = LIVE at once (after bind/silence)
	StayInitializing bool          // never reach LIVE on its own (only SetState moves it)
	DrainTime        time.Duration // --drain-time-s, default 600s like Envoy
	DrainStrategy    string        // "gradual" (default) or "immediate"
	StatsFlush       time.Duration // server.state gauge refresh, default 5s (it lags; server.live does not)
	Log              *slog.Logger  // nil = discard

	// Concurrency is the number of worker threads whose per-worker stats split the
	// connection counts (--concurrency). Default 2.
	Concurrency int
	// Version is the release the fake behaves like (/server_info, and what
	// /drain_listeners does); zero is DefaultVersion.
	Version EnvoyVersion
	// ConfigPath only shows in /server_info, like Envoy's -c.
	ConfigPath string
	// HangOnQuit makes /quitquitquit answer OK without shutting anything down: a proxy
	// stuck in its shutdown. Quit still fires.
	HangOnQuit bool
	// OnAnswered runs after each response a data listener has sent (flushed
	// to the connection: an HTTP/1 response whole, an HTTP/2 stream but for
	// its end), with the number sent so far, on the request's goroutine: a
	// fixture can fail at that event, after an HTTP/1 client has its answer.
	OnAnswered func(n int64)
	// OnInit runs once, synchronously, just before the server first reports LIVE. Envoy
	// installs its signal handlers before it can answer LIVE, so the binary installs its
	// own here and no client can see LIVE while a signal would still kill the process.
	OnInit func()
}

// Envoy is a running fake. Its methods are safe for concurrent use.
type Envoy struct {
	opts      Options
	log       *slog.Logger
	started   time.Time
	adminSock *socket
	listeners []*dataListener
	stats     *store
	adminCx   cxStats
	admin     []adminHandler // sorted by path
	up        upstreams
	answered  atomic.Int64 // responses sent whole, for OnAnswered

	busyMu sync.Mutex // one Busy spell at a time

	mu       sync.Mutex
	phase    initPhase
	hcFailed bool
	manual   bool          // SetState took over from the start-up phases
	loopUp   bool          // the admin loop runs (SilentFor is over)
	silent   bool          // SetSilent(true)
	slow     time.Duration // SetSlow: each admin answer takes this long
	busy     *busySpell    // the main thread is busy until this spell ends
	busyNext *busySpell    // Busy: the spell the next GET /ready starts
	answerCh chan struct{} // closed while the admin answers
	drainAll bool          // a graceful drain of every listener is under way
	drainIn  bool          // one of the inbound listeners is
	timers   []*time.Timer // drain ends, stopped at shutdown
	adminSrv *http.Server
	shutting bool
	levels   map[string]string // /logging

	workersOnce sync.Once
	bound       chan struct{}
	initialized chan struct{}
	initOnce    sync.Once
	quit        chan struct{}
	quitOnce    sync.Once
	stop        chan struct{} // closed when shutdown begins
	done        chan struct{} // closed when shutdown is complete
	stopOnce    sync.Once
	fatal       chan error
	wg          sync.WaitGroup
}

type initPhase int

const (
	uninitialized initPhase = iota
	initializing
	initialized
)

// Start validates the options, reserves every port (so AdminAddr and ListenerAddrs are
// known at once, while connecting is still refused) and returns. The phases then
// progress in the background.
func Start(opts Options) (*Envoy, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	e := &Envoy{
		opts:        opts,
		log:         opts.Log,
		started:     time.Now(),
		stats:       newStore(),
		answerCh:    make(chan struct{}),
		bound:       make(chan struct{}),
		initialized: make(chan struct{}),
		quit:        make(chan struct{}),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		fatal:       make(chan error, 1),
		levels:      make(map[string]string),
		up:          newUpstreams(),
	}
	e.admin = e.adminHandlers()
	if err := e.reservePorts(); err != nil {
		e.releasePorts()
		return nil, err
	}
	e.registerStats()
	e.updateAnswering()
	e.wg.Add(2)
	go e.runPhases()
	go e.flushStats()
	return e, nil
}

func withDefaults(o Options) (Options, error) {
	if o.AdminAddr == "" {
		o.AdminAddr = "127.0.0.1:15000"
	}
	if o.DrainTime == 0 {
		o.DrainTime = 600 * time.Second
	}
	switch o.DrainStrategy {
	case "":
		o.DrainStrategy = "gradual"
	case "gradual", "immediate":
	default:
		return o, fmt.Errorf("drain strategy %q: want gradual or immediate", o.DrainStrategy)
	}
	if o.StatsFlush <= 0 {
		o.StatsFlush = 5 * time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 2
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.BindDelay < 0 || o.SilentFor < 0 || o.InitDelay < 0 || o.DrainTime < 0 {
		return o, errors.New("negative duration in options")
	}
	names := make(map[string]bool)
	o.Listeners = append([]Listener(nil), o.Listeners...)
	for i := range o.Listeners {
		l := &o.Listeners[i]
		if l.Name == "" {
			l.Name = fmt.Sprintf("listener_%d", i)
		}
		if names[l.Name] {
			return o, fmt.Errorf("duplicate listener name %q", l.Name)
		}
		names[l.Name] = true
		if l.StatPrefix == "" {
			l.StatPrefix = sanitizeStatName(l.Name)
		}
	}
	return o, nil
}

func (e *Envoy) reservePorts() error {
	if p := e.opts.AdminPipe; p != "" {
		var err error
		if e.adminSock, err = reserveUnix(p); err != nil {
			return fmt.Errorf("admin pipe: %w", err)
		}
	} else {
		ap, err := netip.ParseAddrPort(e.opts.AdminAddr)
		if err != nil {
			return fmt.Errorf("admin address %q: %w", e.opts.AdminAddr, err)
		}
		if e.adminSock, err = reserve(ap); err != nil {
			return fmt.Errorf("admin address %s: %w", ap, err)
		}
	}
	for _, cfg := range e.opts.Listeners {
		ap, err := netip.ParseAddrPort(cfg.Addr)
		if err != nil {
			return fmt.Errorf("listener %s: address %q: %w", cfg.Name, cfg.Addr, err)
		}
		sock, err := reserve(ap)
		if err != nil {
			return fmt.Errorf("listener %s: %w", cfg.Name, err)
		}
		e.listeners = append(e.listeners, newDataListener(e, cfg, sock))
	}
	return nil
}

func (e *Envoy) releasePorts() {
	if e.adminSock != nil {
		e.adminSock.close()
	}
	for _, l := range e.listeners {
		l.sock.close()
	}
}

// AdminAddr is the admin address with its port resolved, e.g. "127.0.0.1:15000", or
// the unix socket's path. It is known before the port is bound.
func (e *Envoy) AdminAddr() string { return e.adminSock.String() }

// ListenerAddrs are the data listeners' addresses, ports resolved, in Options order.
func (e *Envoy) ListenerAddrs() []netip.AddrPort {
	addrs := make([]netip.AddrPort, len(e.listeners))
	for i, l := range e.listeners {
		addrs[i] = l.addr
	}
	return addrs
}

// State is what /ready would answer now.
func (e *Envoy) State() State {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stateLocked()
}

func (e *Envoy) stateLocked() State {
	switch e.phase {
	case uninitialized:
		return PreInitializing
	case initializing:
		return Initializing
	}
	if e.hcFailed {
		return Draining
	}
	return Live
}

// SetState forces a state, for fixtures. It takes over: the start-up phases no longer
// move the state on their own. LIVE and DRAINING start the workers if they have not
// started yet; DRAINING is a failed health check, as in Envoy.
func (e *Envoy) SetState(s State) {
	e.mu.Lock()
	e.manual = true
	e.mu.Unlock()
	switch s {
	case Live, Draining:
		e.goLive(s == Draining)
	case PreInitializing:
		e.setPhase(uninitialized)
	case Initializing:
		e.setPhase(initializing)
	}
}

// SetSilent makes the admin API accept connections and never answer (on), as an Envoy
// whose main thread is stuck, or answer again (off); held requests are then answered.
func (e *Envoy) SetSilent(on bool) {
	e.mu.Lock()
	e.silent = on
	e.mu.Unlock()
	e.updateAnswering()
}

// SetSlow makes every admin answer take d, as a main thread busy with a
// large xDS push or a /stats dump delays them all (the admin handlers run on
// it); 0 answers at once again. A slow Envoy is alive: it answers, late.
func (e *Envoy) SetSlow(d time.Duration) {
	e.mu.Lock()
	e.slow = d
	e.mu.Unlock()
}

// busySpell is one spell of a busy main thread: how long it lasts, how many
// admin requests it held, and its end.
type busySpell struct {
	d    time.Duration
	held int
	done chan struct{}
}

// Busy makes the main thread busy for d from the arrival of the next GET
// /ready, as one large xDS push or /stats dump that lands just then: that
// request, and every admin request that arrives during the spell, waits for
// its end (the admin handlers run on that thread, while the kernel still
// accepts the connections), and is then answered as usual; the data
// listeners, on the workers, serve throughout. It returns at the spell's
// end, with how many admin requests the spell held (0 if the fake stopped
// before it began). Spells do not overlap: a second waits for the first to end.
func (e *Envoy) Busy(d time.Duration) (held int) {
	e.busyMu.Lock()
	defer e.busyMu.Unlock()
	spell := &busySpell{d: d, done: make(chan struct{})}
	e.mu.Lock()
	e.busyNext = spell
	e.mu.Unlock()
	select {
	case <-spell.done:
	case <-e.stop:
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busyNext == spell {
		e.busyNext = nil
	}
	return spell.held
}

// beginBusy starts the spell Busy armed, if any, at a GET /ready; the caller
// holds mu.
func (e *Envoy) beginBusy() {
	spell := e.busyNext
	if spell == nil || e.busy != nil {
		return
	}
	e.busyNext, e.busy = nil, spell
	select {
	case <-e.answerCh: // the gate is open: close it
		e.answerCh = make(chan struct{})
	default:
	}
	time.AfterFunc(spell.d, func() {
		e.mu.Lock()
		e.busy = nil
		e.mu.Unlock()
		e.updateAnswering()
		close(spell.done)
	})
}

// Quit is closed when POST /quitquitquit arrives.
func (e *Envoy) Quit() <-chan struct{} { return e.quit }

// Bound is closed once the admin port accepts connections (it may still be silent).
// Envoy writes --admin-address-path at that moment.
func (e *Envoy) Bound() <-chan struct{} { return e.bound }

// Initialized is closed when LIVE is first reached, after Options.OnInit has run.
func (e *Envoy) Initialized() <-chan struct{} { return e.initialized }

// Done is closed once the fake has shut down, by /quitquitquit or Close.
func (e *Envoy) Done() <-chan struct{} { return e.done }

// Fatal delivers an error that would make Envoy exit 1 after Start returned, such as a
// port that cannot be listened on once its phase comes.
func (e *Envoy) Fatal() <-chan error { return e.fatal }

// ActiveConnections is the number of open connections over all data listeners, for test
// assertions. Admin connections are not counted.
func (e *Envoy) ActiveConnections() int {
	n := 0
	for _, l := range e.listeners {
		n += int(l.active.Load())
	}
	return n
}

// ReopenLogs does what SIGUSR1 and POST /reopen_logs do.
func (e *Envoy) ReopenLogs() { e.log.Info("reopening access logs", loggerAttr("main")) }

// Close shuts the fake down as Envoy's shutdown does: every listener and connection is
// closed at once, without a drain. It waits until that is done and is idempotent.
func (e *Envoy) Close() error {
	e.shutdown()
	<-e.done
	return nil
}

func (e *Envoy) shutdown() {
	e.stopOnce.Do(func() {
		e.log.Info("shutting down server instance", loggerAttr("main"))
		e.mu.Lock()
		e.shutting = true
		for _, t := range e.timers {
			t.Stop()
		}
		srv := e.adminSrv
		e.mu.Unlock()
		close(e.stop)
		e.updateAnswering()
		for _, l := range e.listeners {
			l.closeAll()
		}
		e.up.close()
		if srv != nil {
			closeAdmin(srv)
		} else {
			e.adminSock.close()
		}
		go func() {
			e.wg.Wait()
			e.log.Info("main dispatch loop exited", loggerAttr("main"))
			close(e.done)
		}()
	})
}

// reportFatal passes on an error that ends Envoy, unless the fake is shutting down
// anyway (which is what made a socket go away under a phase).
func (e *Envoy) reportFatal(err error) {
	select {
	case <-e.stop:
		return
	default:
	}
	e.log.Log(context.Background(), LevelCritical, err.Error(), loggerAttr("main"))
	select {
	case e.fatal <- err:
	default:
	}
}

// sanitizeStatName does what Envoy does to a name that goes into a stat: ':' is the
// tag separator of some sinks, so it becomes '_'.
func sanitizeStatName(s string) string { return strings.ReplaceAll(s, ":", "_") }
