package supervise

import (
	"context"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
)

// Following the tracker: every change of readiness, in order, acted on by one
// actor that moves the lifecycle and keeps the socket's ready mark.

// followReadiness is the actor that acts on the tracker's changes of
// readiness, every one and in order: it is the one place that moves the
// lifecycle to Ready, notes Envoy's death, keeps the socket's ready mark,
// and logs and counts the changes. What the tracker published before the
// group's end (its status at the proxy's exit) is still acted on.
func (s *Supervisor) followReadiness(ctx context.Context, sock *control.Server) error {
	for {
		// Read at the group's end too: one last take after ctx is done.
		done := ctx.Err() != nil
		changes, more := s.tracker.Changes()
		for _, c := range changes {
			s.readinessChanged(c, sock)
		}
		if done {
			return nil
		}
		select {
		case <-more:
		case <-ctx.Done():
		}
	}
}

// readinessChanged acts on one change. The first readiness is noted, and
// the phase moved, before the socket's mark and before WaitReady answers
// (announceReady): a client told the proxy is ready may send its preStop
// or SIGTERM at once, and that must find it has been ready. A first
// readiness that comes once a stop is decided is refused by the lifecycle,
// and then nothing follows the tracker: no mark, no count, no "ready".
//
// A change is stamped when it is acted on, on the supervisor's clock, as
// every stamp of the lifecycle is: the tracker's own stamp is on its own.
func (s *Supervisor) readinessChanged(c envoy.Change, sock *control.Server) {
	old, now, at := c.Old, c.Now, s.cfg.Clock.Now()
	first := now.Ready && s.life.becameReady(at, "admin API says "+now.Reason)
	taken := s.life.everReady()
	// The socket's mark says what /v1/ready would answer at once: only
	// Ready, not the DRAINING of our own drain that WaitReady also takes,
	// since a mark that is missing only costs a client its request.
	sock.MarkReady(now.Ready && taken)
	if first {
		s.life.announceReady()
	}
	// Envoy's death can show after another reason for not being ready (a
	// connection reset mid-request), so it is noted whenever it appears.
	if now.Down && !old.Down {
		s.life.noteEnvoyDown(at)
	}
	if now.Ready == old.Ready {
		return
	}
	if !taken {
		if now.Ready {
			s.log.Info("proxy ready after a stop was decided; not taken as ready", "reason", s.life.neverReady())
		}
		return
	}
	s.m.readyChanged(now.Ready)
	switch {
	case first:
		s.log.Info("proxy ready", "after", at.Sub(s.start).Round(time.Millisecond))
	case now.Ready:
		s.log.Info("proxy ready again")
	default:
		if p, _ := s.life.current(); p < Stopping {
			s.log.Warn("proxy not ready", "reason", now.Reason)
		} else {
			s.log.Info("proxy no longer ready", "reason", now.Reason)
		}
	}
}
