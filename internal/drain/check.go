package drain

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
)

// The drain's checks: what it asks Envoy, the scanner and Running, each
// call within its bounds, and how it reads their answers.

// callCtx bounds one admin call by adminCallMax and by the drain's deadline.
// A call made at or after the deadline still gets a millisecond, so that an
// admin API that answers at once is still heard.
func (d *drainer) callCtx(deadline time.Time) (context.Context, context.CancelFunc) {
	budget := min(adminCallMax, max(deadline.Sub(d.clock.Now()), time.Millisecond))
	return clock.WithTimeout(d.ctx, d.clock, budget)
}

// state is what one check of the drain condition saw.
type state struct {
	ports   []uint16
	perr    error
	conns   envoy.Connections
	known   bool // conns was read (it is not needed while the app listens)
	cerr    error
	running int
	rerr    error // the running peers cannot be counted
}

// holds reports whether the drained condition holds.
func (st state) holds() bool {
	return st.perr == nil && len(st.ports) == 0 && st.known && st.conns.Busy == 0 && st.running == 0 && st.rerr == nil
}

// running counts the peers still running under exec, when Running is set.
func (d *drainer) running() (int, error) {
	if d.cfg.Running == nil {
		return 0, nil
	}
	return d.cfg.Running()
}

// PeersEnded is the rule for peers whose verdict is settled: nothing is
// left to wait for once no peer runs under exec. A peer that still runs is
// the app, alive, and may still send through the proxy (under Never one
// peer's failure settles the verdict while another uploads), so it holds
// the stop until its end, within the drain's bound. A count that cannot be
// known (Running's error: the records directory was replaced) is never
// none. n and err are Running's answer (none, for a nil Running). The
// drain ends by it (PeersCompleted), and the supervisor asks it before it
// stops the proxy for a settled verdict outside a drain: a peer still
// running makes that stop a drain of its own.
func PeersEnded(running func() (int, error)) (ended bool, n int, err error) {
	if running != nil {
		n, err = running()
	}
	return n == 0 && err == nil, n, err
}

// hintIfDue ends the delay once it has passed, or once the app listens on
// no port (st, the check just made), and then asks Envoy to fail its
// health checks if told to: once, as it always was.
func (d *drainer) hintIfDue(hintAt, deadline time.Time, st state) {
	if d.hinting {
		return
	}
	now := d.clock.Now()
	appGone := st.perr == nil && len(st.ports) == 0
	if now.Before(hintAt) && !appGone {
		return
	}
	d.hinting = true
	if d.cfg.Delay > 0 && !d.cfg.Recheck {
		why := "delay passed"
		if now.Before(hintAt) {
			why = "the app listens on no port"
		}
		d.cfg.Log.Info("drain delay over; the close hints go now", "reason", why, "after", now.Sub(hintAt.Add(-d.cfg.Delay)).Round(time.Millisecond))
	}
	if d.cfg.HealthcheckFail && !d.cfg.Recheck {
		ctx, cancel := d.callCtx(deadline)
		if err := d.cfg.Admin.Post(ctx, "/healthcheck/fail"); err != nil && d.ctx.Err() == nil {
			d.cfg.Log.Warn("admin /healthcheck/fail failed; draining anyway", "err", err)
		}
		cancel()
	}
}

// tryDrainListeners makes the drain call once, and says what became of it.
func (d *drainer) tryDrainListeners(deadline time.Time) {
	switch err := d.drainListeners(deadline); {
	case errors.Is(err, errReleaseUnknown):
		if !d.releaseUnknownSaid {
			d.releaseUnknownSaid = true
			d.cfg.Log.Warn("no drain call while Envoy's release is unknown; asking again", "every", d.cfg.Progress)
		}
	case err != nil && d.ctx.Err() != nil:
		// Cut by the stop: no failure of Envoy's.
	case err != nil:
		d.cfg.Log.Warn("admin /drain_listeners failed; will try again", "err", err)
	default:
		d.listenersDrained = true
		if d.cfg.Hinted != nil {
			d.cfg.Hinted()
		}
	}
}

// errReleaseUnknown: no call yet, since the one an unknown release gets
// is none, and the release may still be read.
var errReleaseUnknown = errors.New("Envoy's release unknown")

// drainListeners makes the drain's /drain_listeners call for Envoy's
// release, if that release has one.
func (d *drainer) drainListeners(deadline time.Time) error {
	if d.cfg.Call == nil {
		return nil
	}
	ctx, cancel := d.callCtx(deadline)
	call, known := d.cfg.Call(ctx)
	cancel()
	if call.Flags == nil {
		if !known {
			return errReleaseUnknown
		}
		d.cfg.Log.Info("listeners left undrained: this release's drain call is none", "gives_up", strings.Join(call.GivesUp, "; "))
		return nil
	}
	ctx, cancel = d.callCtx(deadline)
	defer cancel()
	if err := d.cfg.Admin.Post(ctx, "/drain_listeners", call.Flags...); err != nil {
		return err
	}
	d.cfg.Log.Info("listeners drained", "call", call.String())
	return nil
}

// appPorts lists the ports the app still listens on.
func (d *drainer) appPorts(scan Scanner, envoyPorts []uint16) ([]uint16, error) {
	socks, err := scan.Listening()
	if err != nil {
		return nil, err
	}
	return portwatch.Ports(d.cfg.Owner.AppSockets(socks, envoyPorts)), nil
}

// connections asks Envoy about the downstream connections it holds. An
// admin API that refuses connections means Envoy is not running, so it holds
// none; one that does not answer is unknown, and the drain waits on.
func (d *drainer) connections(deadline time.Time) (envoy.Connections, error) {
	ctx, cancel := d.callCtx(deadline)
	defer cancel()
	c, err := d.cfg.Admin.Connections(ctx, d.exclude)
	if envoy.Refused(err) {
		return envoy.Connections{}, nil
	}
	return c, err
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
	if !errors.Is(err, context.DeadlineExceeded) && !envoy.Refused(err) && d.ctx.Err() == nil {
		d.cfg.Log.Warn("admin /listeners failed; using the ports learned at start", "err", err)
	}
	return learned
}
