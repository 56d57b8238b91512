// Package drain ends a pod's traffic gracefully before its proxy stops: it
// asks Envoy to drain its listeners, then waits until the app has stopped
// listening and Envoy holds no downstream connection, no sooner than a
// minimum and no later than a bound.
//
// A Drain knows nothing of the supervisor's lifecycle: its admin client, its
// scanner of listening sockets and its clock are passed in, and whoever runs
// it decides what its end means.
package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
)

// Admin is what a drain asks of Envoy's admin API (envoy.Admin).
type Admin interface {
	Post(ctx context.Context, path string, flags ...string) error
	ActiveConnections(ctx context.Context, exclude []uint16) (int, error)
	ListenerPorts(ctx context.Context) ([]uint16, error)
}

// Scanner lists the listening TCP sockets of the pod (portwatch.Scanner).
type Scanner interface {
	Listening() ([]portwatch.Socket, error)
}

// Defaults of Config's pacing. The port scan is a netlink dump of listeners
// only (tens of microseconds), but each tick also wakes an idle process,
// which on a small VM costs 0.1-0.3 ms of CPU: at 10 ms that was 20-30 ms of
// CPU per second of drain. 40 ms keeps a drain that waits on a listening app
// to about a quarter of that, and still answers a closed port within one
// tick, inside prestop's 50 ms (docs/benchmarks.md). Envoy's stats are asked for
// at once when the app's ports are seen closed (until then the answer cannot
// end the drain), then at most every StatsEvery: /stats runs on Envoy's main
// thread.
const (
	DefaultTick       = 40 * time.Millisecond
	DefaultStatsEvery = 100 * time.Millisecond
	DefaultProgress   = time.Second
	// adminCallMax bounds one admin call, and the drain's deadline bounds
	// it further: a silent admin API must not carry the drain past its
	// bound.
	adminCallMax = 500 * time.Millisecond
)

// Config is one drain's parts and bounds.
type Config struct {
	Admin   Admin
	Scanner Scanner
	Owner   portwatch.Owner // tells the app's sockets and connections from the proxy's

	Min     time.Duration // the shortest drain
	Timeout time.Duration // the longest drain

	// InboundOnly drains only listeners marked inbound (sidecars).
	InboundOnly bool
	// HealthcheckFail also POSTs /healthcheck/fail, for edge proxies that
	// load balancers health-check through Envoy. It makes Envoy hint every
	// connection to close, outbound ones included, while the app may still
	// be finishing an upload through it, so it is off for sidecars.
	HealthcheckFail bool

	// Tick is how often the condition is checked, StatsEvery how often
	// Envoy's stats are asked for, Progress how often progress is logged
	// and /drain_listeners retried; zero means the defaults.
	Tick, StatsEvery, Progress time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	Log *slog.Logger
}

// End is how a drain ended.
type End string

const (
	Drained        End = "drained"         // the app stopped listening and Envoy's connections reached zero
	TimedOut       End = "timeout"         // the bound came first
	PeersCompleted End = "peers-completed" // every peer ended: nothing left to wait for
)

// Result is a finished drain.
type Result struct {
	End  End
	Took time.Duration
}

// OK reports whether the drain condition held (or there was nothing to wait
// for).
func (r Result) OK() bool { return r.End != TimedOut }

// Run drains: readiness is the caller's to withdraw first. envoyPorts are
// the ports of Envoy's listeners learned earlier, used when the admin API
// cannot tell them now. A close of settled (every peer has ended) ends the
// drain at once.
func Run(cfg Config, envoyPorts []uint16, settled <-chan struct{}) Result {
	d := newDrainer(cfg)
	start := d.now()
	d.cfg.Log.Info("drain started", "min", cfg.Min, "timeout", cfg.Timeout)
	deadline := start.Add(cfg.Timeout)
	if cfg.HealthcheckFail {
		ctx, cancel := d.callCtx(deadline)
		if err := cfg.Admin.Post(ctx, "/healthcheck/fail"); err != nil {
			d.cfg.Log.Warn("admin /healthcheck/fail failed; draining anyway", "err", err)
		}
		cancel()
	}
	envoyPorts = d.refreshEnvoyPorts(deadline, envoyPorts)
	end := d.wait(start, deadline, envoyPorts, settled)
	r := Result{End: end, Took: d.now().Sub(start)}
	d.cfg.Log.Info("drain ended", "end", string(end), "after", r.Took.Round(time.Millisecond))
	return r
}

type drainer struct {
	cfg     Config
	now     func() time.Time
	exclude []uint16
}

func newDrainer(cfg Config) *drainer {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.StatsEvery <= 0 {
		cfg.StatsEvery = DefaultStatsEvery
	}
	if cfg.Progress <= 0 {
		cfg.Progress = DefaultProgress
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &drainer{cfg: cfg, now: now, exclude: cfg.Owner.QuietPorts()}
}

// callCtx bounds one admin call by adminCallMax and by the drain's deadline.
// A call made at or after the deadline still gets a millisecond, so that an
// admin API that answers at once is still heard.
func (d *drainer) callCtx(deadline time.Time) (context.Context, context.CancelFunc) {
	budget := min(adminCallMax, max(deadline.Sub(d.now()), time.Millisecond))
	return context.WithTimeout(context.Background(), budget)
}

// wait checks the drain condition every tick until it holds (no sooner than
// Min), the deadline passes or settled closes.
func (d *drainer) wait(start, deadline time.Time, envoyPorts []uint16, settled <-chan struct{}) End {
	earliest := start.Add(d.cfg.Min)
	tick := time.NewTicker(d.cfg.Tick)
	defer tick.Stop()
	var lastLog, lastStats, lastDrainTry time.Time
	listenersDrained, conns := false, -1
	var cerr error
	for {
		select {
		case <-settled:
			return PeersCompleted
		default:
		}
		if !listenersDrained && d.now().Sub(lastDrainTry) >= d.cfg.Progress {
			// Retried until Envoy accepts it once: a busy admin API at the
			// first try must not leave Envoy undrained for the whole
			// termination.
			lastDrainTry = d.now()
			if err := d.drainListeners(deadline); err != nil {
				d.cfg.Log.Warn("admin /drain_listeners failed; will try again", "err", err)
			} else {
				listenersDrained = true
			}
		}
		ports, perr := d.appPorts(envoyPorts)
		switch {
		case perr != nil || len(ports) > 0:
			conns, cerr = -1, nil // unknown, and not needed yet
		case conns < 0 || d.now().Sub(lastStats) >= d.cfg.StatsEvery:
			lastStats = d.now()
			conns, cerr = d.activeConnections(deadline)
		}
		now := d.now()
		if perr == nil && len(ports) == 0 && conns == 0 && !now.Before(earliest) {
			return Drained
		}
		if !now.Before(deadline) {
			d.cfg.Log.Warn("drain timed out", "open_ports", fmt.Sprint(ports), "connections", conns, "timeout", d.cfg.Timeout)
			return TimedOut
		}
		if now.Sub(lastLog) >= d.cfg.Progress {
			lastLog = now
			d.logProgress(now, earliest, deadline, ports, conns, perr, cerr)
		}
		select {
		case <-settled:
			return PeersCompleted
		case <-tick.C:
		}
	}
}

func (d *drainer) logProgress(now, earliest, deadline time.Time, ports []uint16, conns int, perr, cerr error) {
	attrs := []any{"open_ports", fmt.Sprint(ports), "remaining", deadline.Sub(now).Round(100 * time.Millisecond)}
	if conns >= 0 {
		attrs = append(attrs, "connections", conns)
	}
	if perr != nil {
		attrs = append(attrs, "scan_err", perr)
	}
	if cerr != nil {
		attrs = append(attrs, "admin_err", cerr)
	}
	if now.Before(earliest) {
		attrs = append(attrs, "min_left", earliest.Sub(now).Round(100*time.Millisecond))
	}
	d.cfg.Log.Info("draining", attrs...)
}

// drainListeners asks Envoy to drain its listeners gracefully.
func (d *drainer) drainListeners(deadline time.Time) error {
	ctx, cancel := d.callCtx(deadline)
	defer cancel()
	flags := []string{"graceful"}
	if d.cfg.InboundOnly {
		flags = append(flags, "inboundonly")
	}
	return d.cfg.Admin.Post(ctx, "/drain_listeners", flags...)
}

// appPorts lists the ports the app still listens on.
func (d *drainer) appPorts(envoyPorts []uint16) ([]uint16, error) {
	socks, err := d.cfg.Scanner.Listening()
	if err != nil {
		return nil, err
	}
	return portwatch.Ports(d.cfg.Owner.AppSockets(socks, envoyPorts)), nil
}

// activeConnections asks Envoy how many downstream connections it holds. An
// admin API that refuses connections means Envoy is not running, so it holds
// none; one that does not answer is unknown, and the drain waits on.
func (d *drainer) activeConnections(deadline time.Time) (int, error) {
	ctx, cancel := d.callCtx(deadline)
	defer cancel()
	n, err := d.cfg.Admin.ActiveConnections(ctx, d.exclude)
	switch {
	case envoy.Refused(err):
		return 0, nil
	case err != nil:
		return -1, err
	}
	return n, nil
}

// refreshEnvoyPorts asks Envoy for its listeners' ports now, falling back to
// those learned earlier.
func (d *drainer) refreshEnvoyPorts(deadline time.Time, learned []uint16) []uint16 {
	ctx, cancel := d.callCtx(deadline)
	defer cancel()
	ports, err := d.cfg.Admin.ListenerPorts(ctx)
	if err == nil {
		return ports
	}
	if !errors.Is(err, context.DeadlineExceeded) && !envoy.Refused(err) {
		d.cfg.Log.Warn("admin /listeners failed; using the ports learned at start", "err", err)
	}
	return learned
}
