// Package drain ends a pod's traffic gracefully before its proxy stops: it
// asks Envoy to drain its listeners, then waits until the app has really
// ended: no peer still running under exec, no port of the app's listening
// and no busy downstream connection in Envoy, all of it for a quiet period,
// no sooner than a minimum and no later than a bound.
//
// A Drain knows nothing of the supervisor's lifecycle: its admin client, its
// scanner of listening sockets, its clock and timer and a count of the peers
// still running are passed in, and whoever runs it decides what its end means.
package drain

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
)

// Admin is what a drain asks of Envoy's admin API (envoy.Admin).
type Admin interface {
	Post(ctx context.Context, path string, flags ...string) error
	Connections(ctx context.Context, exclude []uint16) (envoy.Connections, error)
	ListenerPorts(ctx context.Context) ([]uint16, error)
}

// Scanner lists the listening TCP sockets of the pod (portwatch.Scanner).
type Scanner interface {
	Listening() ([]portwatch.Socket, error)
}

// OpenScanner is a Scanner held open for a drain's life
// (portwatch.OpenScanner). Closed receives when a listening socket may have
// closed, and is closed when it can tell no more; nil means it never tells.
type OpenScanner interface {
	Scanner
	Closed() <-chan struct{}
	Close()
}

// Defaults of Config's pacing. Each check wakes an idle supervisor, and on a
// small VM a wake costs 0.15-0.4 ms of CPU whatever it does, so a drain
// checks only as often as an answer could change. While the app listens,
// an OpenScanner (portwatch.OpenScanner, the kernel's word that a listening
// socket was destroyed) reports its close at once, and the ports are
// scanned anyway every WatchedTick: a listener shut down but not closed, or
// destroyed late, is reported by nothing else. Without an OpenScanner, and
// once the app's ports are closed (the quiet period, busy connections, peers under exec), the
// condition is checked every Tick, so that a close, a new listener or a
// peer's end is seen within 40 ms, inside prestop's 50 ms
// (docs/benchmarks.md). Envoy's stats are asked for at once when the app's
// ports are seen closed (until then the answer cannot end the drain), then
// at most every StatsEvery: /stats runs on Envoy's main thread.
const (
	DefaultTick        = 40 * time.Millisecond
	DefaultWatchedTick = 200 * time.Millisecond
	DefaultStatsEvery  = 100 * time.Millisecond
	DefaultProgress    = time.Second
	// DefaultQuiet is how long the drained condition must hold before the
	// drain ends. An app that closes its listener on SIGTERM and then
	// opens a connection through the proxy (to upload its logs) would
	// otherwise lose the proxy in the gap; a few stats polls are enough
	// for a connection opened just after the close to show, and little
	// enough to add to preStop's lag.
	DefaultQuiet = 300 * time.Millisecond
	// adminCallMax bounds one admin call, and the drain's deadline bounds
	// it further: a silent admin API must not carry the drain past its
	// bound.
	adminCallMax = 500 * time.Millisecond
)

// Config is one drain's parts and bounds.
type Config struct {
	Admin   Admin
	Scanner Scanner
	// OpenScanner, if set, opens the drain's OpenScanner, which then stands in for
	// Scanner: a drain waiting on a listening app wakes when a listener
	// closes, not every Tick.
	OpenScanner func() OpenScanner
	Owner       portwatch.Owner // tells the app's sockets and connections from the proxy's

	Min     time.Duration // the shortest drain
	Timeout time.Duration // the longest drain
	// Delay holds the close hints (the /drain_listeners call, and
	// /healthcheck/fail) back from the drain's start: until the pod has
	// left every client's endpoints, a hint only sends a client back to
	// this pod on a new connection. Readiness is withdrawn at once all the
	// same (unless the caller waits for Hinted), and the listeners accept
	// throughout. It ends early once the app listens on no port: its
	// clients then have nowhere here to come back to, and a kept
	// connection is better told to go.
	Delay time.Duration

	// Call chooses the /drain_listeners request for Envoy's release
	// (ChooseCall), within ctx; known false: the release is not known
	// (yet), and the call is ChooseCall's for an unknown one. While that
	// is no call at all, the drain asks again at each retry (Progress), so
	// that a release read late, past one slow /server_info, still gets its
	// call. Nil: no call.
	Call func(ctx context.Context) (c Call, known bool)
	// HealthcheckFail also POSTs /healthcheck/fail, for edge proxies that
	// load balancers health-check through Envoy. It makes Envoy hint every
	// connection to close, outbound ones included, while the app may still
	// be finishing an upload through it, so it is off for sidecars.
	HealthcheckFail bool
	// Hinted, if set, is called once, on the drain's goroutine, when the
	// close hints have gone out: Envoy accepted the drain call, or there
	// is none to make (this release takes none, or Call is nil). Not while
	// Envoy refuses the call or the release to choose it by is unknown,
	// and never on a Recheck, whose hints went with the first drain. A
	// caller that keeps readiness until then (a Cilium before 1.19 cuts a
	// not-ready terminating backend's connections) must not block it.
	Hinted func()

	// Running, if set, says how many peers still run under exec (a
	// running record whose lock is held). Such a peer is the app, alive:
	// it may still send through the proxy, so it holds the drain until it
	// has ended or the bound comes. An error means the count cannot be
	// known (the records directory was replaced): that holds the drain to
	// its bound, never ends it, and the drain's lines say why.
	Running func() (int, error)
	// Recheck: the listeners were drained already (a preStop's drain that
	// ended before SIGTERM); only wait for the condition again. A condition
	// that holds at the first check ends it at once: the first drain's
	// quiet period has passed, and a second would only delay the stop.
	Recheck bool

	// Tick is how often the condition is checked, WatchedTick how often
	// while the OpenScanner reports the app's close, StatsEvery how often Envoy's
	// stats are asked for, Progress how often progress is logged and
	// /drain_listeners retried, Quiet how long the condition must hold;
	// zero means the defaults.
	Tick, WatchedTick, StatsEvery, Progress, Quiet time.Duration
	// Clock is the drain's time, its reading and its timer; nil means the
	// system's.
	Clock clock.Clock

	Log *slog.Logger
}

// End is how a drain ended. Its words are control's on the wire too
// (control.Drained, DrainTimedOut, PeersCompleted, Stopped), as the
// supervise tests check.
type End string

const (
	Drained        End = "drained"         // no peer running, no app port and no busy connection, for the quiet period
	TimedOut       End = "timeout"         // the bound came first
	PeersCompleted End = "peers-completed" // every peer ended: nothing left to wait for
	Stopped        End = "stopped"         // Run's ctx ended: the proxy is being stopped, and nothing is left to drain
)

// Result is a finished drain.
type Result struct {
	End  End
	Took time.Duration
	// Why: at TimedOut, an error that held the drain in the app's place
	// (Running's: the running peers could not be counted), if one did.
	Why string
}

// OK reports whether the drain condition held (or there was nothing to wait
// for).
func (r Result) OK() bool { return r.End != TimedOut }

// Run drains: readiness is the caller's to withdraw first. envoyPorts are
// the ports of Envoy's listeners learned earlier, used when the admin API
// cannot tell them now. A close of settled (the peers' verdict is settled)
// ends the drain at once, as soon as no peer runs under exec any more. The
// end of ctx ends it too (Stopped), and the admin call under way: the
// caller has decided the stop, and must not be left waiting, nor the
// drain go on asking an Envoy that quits.
func Run(ctx context.Context, cfg Config, envoyPorts []uint16, settled <-chan struct{}) Result {
	d := newDrainer(cfg)
	d.ctx = ctx
	start := d.clock.Now()
	deadline := start.Add(cfg.Timeout)
	if cfg.Recheck {
		d.cfg.Log.Info("drain re-checked", "timeout", cfg.Timeout)
		d.listenersDrained = true
		d.cfg.Min = 0
	} else {
		d.cfg.Log.Info("drain started", "min", cfg.Min, "timeout", cfg.Timeout, "delay", cfg.Delay)
	}
	// The checks' timer is the drain's first: the admin calls' bounds come
	// after it, so that a test's clock tells the two apart.
	timer := d.clock.NewTimer(d.cfg.Tick)
	defer timer.Stop()
	envoyPorts = d.refreshEnvoyPorts(deadline, envoyPorts)
	end, why := d.wait(timer, start, deadline, envoyPorts, settled)
	r := Result{End: end, Took: d.clock.Now().Sub(start), Why: why}
	d.cfg.Log.Info("drain ended", "end", string(end), "after", r.Took.Round(time.Millisecond))
	return r
}

type drainer struct {
	ctx     context.Context // Run's: its end is the drain's
	cfg     Config
	clock   clock.Clock
	exclude []uint16

	hinting            bool      // the delay is over: the close hints may go
	listenersDrained   bool      // Envoy accepted /drain_listeners, or this release takes none
	releaseUnknownSaid bool      // the wait for a release to choose the call by was logged
	lastClose          time.Time // when a close the OpenScanner reported was last acted on
}

func newDrainer(cfg Config) *drainer {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.WatchedTick <= 0 {
		cfg.WatchedTick = DefaultWatchedTick
	}
	if cfg.StatsEvery <= 0 {
		cfg.StatsEvery = DefaultStatsEvery
	}
	if cfg.Progress <= 0 {
		cfg.Progress = DefaultProgress
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = DefaultQuiet
	}
	return &drainer{cfg: cfg, clock: clock.Or(cfg.Clock), exclude: cfg.Owner.QuietPorts()}
}

// wait checks the drain condition until it has held for the quiet period
// (and no sooner than Min), the deadline passes or settled closes: every
// tick, or when the OpenScanner reports a close.
func (d *drainer) wait(timer clock.Timer, start, deadline time.Time, envoyPorts []uint16, settled <-chan struct{}) (End, string) {
	earliest := start.Add(d.cfg.Min)
	hintAt := start.Add(d.cfg.Delay)
	scan, closed := d.cfg.Scanner, (<-chan struct{})(nil)
	if d.cfg.OpenScanner != nil {
		w := d.cfg.OpenScanner()
		defer w.Close()
		scan, closed = w, w.Closed()
	}
	var lastLog, lastStats, lastDrainTry, quietSince time.Time
	var st state
	// Settled peers end the drain at once, unless one still runs under
	// exec: under Never the first failure settles the verdict while another
	// peer may still be finishing, through the proxy.
	peersDone := false
	for first := true; ; first = false {
		if d.ctx.Err() != nil {
			return Stopped, ""
		}
		select {
		case <-settled:
			settled, peersDone = nil, true
		default:
		}
		if peersDone {
			var ended bool
			if ended, st.running, st.rerr = PeersEnded(d.cfg.Running); ended {
				return PeersCompleted, ""
			}
		}
		st.ports, st.perr = d.appPorts(scan, envoyPorts)
		// The hints go before Envoy's stats are asked for, as soon as the
		// delay allows: a slow /stats must not hold them back.
		d.hintIfDue(hintAt, deadline, st)
		if !d.listenersDrained && d.hinting && d.clock.Now().Sub(lastDrainTry) >= d.cfg.Progress {
			// Retried until Envoy accepts it once: a busy admin API at the
			// first try must not leave Envoy undrained for the whole
			// termination.
			lastDrainTry = d.clock.Now()
			d.tryDrainListeners(deadline)
		}
		switch {
		case st.perr != nil || len(st.ports) > 0:
			// Unknown, and not needed yet; asked for at once when the
			// ports close, then at most every StatsEvery, failed or not.
			st.known, st.cerr, lastStats = false, nil, time.Time{}
		case d.clock.Now().Sub(lastStats) >= d.cfg.StatsEvery:
			lastStats = d.clock.Now()
			st.conns, st.cerr = d.connections(deadline)
			st.known = st.cerr == nil
		}
		if !peersDone {
			st.running, st.rerr = 0, nil
		}
		if st.holds() {
			st.running, st.rerr = d.running() // asked only when nothing else holds the drain
		}
		now := d.clock.Now()
		switch {
		case !st.holds():
			quietSince = time.Time{}
		case d.cfg.Recheck && first:
			// The first drain held its quiet period already, and nothing
			// has opened since: a second one would only delay the stop.
			return Drained, ""
		case quietSince.IsZero():
			quietSince = now
		}
		if !quietSince.IsZero() && now.Sub(quietSince) >= d.cfg.Quiet && !now.Before(earliest) {
			return Drained, ""
		}
		if !now.Before(deadline) {
			d.cfg.Log.Warn("drain timed out", d.attrs(now, earliest, deadline, st)...)
			if st.rerr != nil {
				return TimedOut, st.rerr.Error()
			}
			return TimedOut, ""
		}
		if now.Sub(lastLog) >= d.cfg.Progress {
			lastLog = now
			d.cfg.Log.Info("draining", d.attrs(now, earliest, deadline, st)...)
		}
		sleep := d.sleep(now, st, closed != nil, quietSince, earliest, deadline)
		if !d.hinting {
			sleep = min(sleep, max(hintAt.Sub(now), 0)) // the hints go at the delay's end, to the millisecond
		}
		closed = d.await(timer, sleep, settled, closed)
	}
}

// await waits for the next check: after sleep, when settled closes, or when
// the OpenScanner reports a close. A close is acted on at once, unless another
// was less than a Tick ago: an app that churns sockets it never connects
// must not make the drain scan flat out. It returns the OpenScanner's channel,
// nil once it can tell no more.
func (d *drainer) await(timer clock.Timer, sleep time.Duration, settled, closed <-chan struct{}) <-chan struct{} {
	due := d.clock.Now().Add(sleep)
	timer.Reset(sleep)
	deferred := false // the timer is a close's, put off
	for {
		select {
		case <-d.ctx.Done():
			return closed
		case <-settled:
			return closed
		case <-timer.C():
			if deferred {
				d.lastClose = d.clock.Now()
			}
			return closed
		case _, ok := <-closed:
			if !ok {
				return nil // poll
			}
			now := d.clock.Now()
			next := d.lastClose.Add(d.cfg.Tick)
			if !next.After(now) {
				d.lastClose = now
				return closed
			}
			if next.Before(due) {
				due, deferred = next, true
				timer.Reset(next.Sub(now))
			}
		}
	}
}

// sleep is how long to wait before the next check: a Tick, or WatchedTick
// while the OpenScanner will report the app's close, cut short to end the quiet
// period on time and to stop at the deadline.
func (d *drainer) sleep(now time.Time, st state, watched bool, quietSince, earliest, deadline time.Time) time.Duration {
	next := now.Add(d.cfg.Tick)
	if watched && st.perr == nil && len(st.ports) > 0 {
		next = now.Add(d.cfg.WatchedTick)
	}
	if !quietSince.IsZero() {
		next = minTime(next, maxTime(quietSince.Add(d.cfg.Quiet), earliest))
	}
	return max(minTime(next, deadline).Sub(now), 0)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// attrs describe where the drain stands, for its progress and timeout lines.
func (d *drainer) attrs(now, earliest, deadline time.Time, st state) []any {
	attrs := []any{"open_ports", fmt.Sprint(st.ports), "remaining", max(deadline.Sub(now), 0).Round(100 * time.Millisecond)}
	if st.known {
		attrs = append(attrs, "connections", st.conns.Active, "busy", st.conns.Busy)
	}
	if st.running > 0 {
		attrs = append(attrs, "peers_running", st.running)
	}
	if st.rerr != nil {
		attrs = append(attrs, "peers_err", st.rerr)
	}
	if st.perr != nil {
		attrs = append(attrs, "scan_err", st.perr)
	}
	if st.cerr != nil {
		attrs = append(attrs, "admin_err", st.cerr)
	}
	if now.Before(earliest) {
		attrs = append(attrs, "min_left", earliest.Sub(now).Round(100*time.Millisecond))
	}
	return attrs
}
