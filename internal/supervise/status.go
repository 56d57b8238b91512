package supervise

import (
	"context"
	"fmt"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/completion"
	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The control socket's backend (control.Backend) and the health server's
// readiness: what the supervisor answers, all of it read from the lifecycle,
// the tracker and the completion book.

// WaitReady is GET /v1/ready. It answers for the app: can the proxy carry its
// traffic? So it stays true during a drain, when outbound traffic still flows;
// only /healthz/ready flips then.
func (s *Supervisor) WaitReady(ctx context.Context) (bool, string) {
	for {
		ready, why, changed := s.readyNow()
		if ready {
			return true, ""
		}
		select {
		case <-changed:
		case <-ctx.Done():
			// What holds at ctx's end is the answer: a select that finds
			// both channels ready picks one at random, and a wait of zero
			// (ctx done on arrival) must not answer a proxy ready for
			// seconds as not yet noted.
			ready, why, _ = s.readyNow()
			return ready, why
		}
	}
}

// readyNow is WaitReady's answer at this instant, and the channel that is
// closed when it may change.
func (s *Supervisor) readyNow() (bool, string, <-chan struct{}) {
	st, changed := s.tracker.Status()
	// DRAINING during our drain is our own /healthcheck/fail
	// (--drain-healthcheck-fail): Envoy still carries the app's traffic.
	if !st.Ready && (st.Reason != "DRAINING" || !s.life.draining()) {
		return false, st.Reason, changed
	}
	// The tracker tells first, and the readiness actor an instant later:
	// the app's SIGTERM or preStop that follows this answer must find the
	// proxy has been ready. A first readiness after a stop was decided is
	// never noted: the answer waits for ctx, as for a proxy not ready, and
	// does not spin.
	if readied := s.life.readiedCh(); !isClosed(readied) {
		return false, s.whyReadyNotTaken(), readied
	}
	return true, "", nil
}

// Complete is POST /v1/complete. The peer's own record is normally on disk
// already (complete and exec write it before they poke); the book keeps a
// completion that arrives by POST alone, so that it too survives a restart.
// A caller over the socket may report only for a peer whose record it owns
// (see completion.Book.Report).
func (s *Supervisor) Complete(ctx context.Context, c control.Completion) error {
	uid, known := control.CallerUID(ctx)
	caller := completion.Anyone
	if known {
		caller = int64(uid)
	}
	r := peers.Record{Name: c.Peer, ExitCode: c.Code, Reason: peers.Reason(c.Reason), Stop: peers.Stop{Signal: c.StopSignal, At: c.StoppedAt}}
	_, err := s.book.Report(r, caller)
	return err
}

// Drain is POST /v1/drain, the preStop hook: start the drain if it has not
// started, and wait for its end or ctx. A proxy that is already stopping has
// nothing left to drain, and one that was never ready has carried no
// traffic to drain: the hook returns at once, so that the pod's
// termination is not held up by a proxy that cannot start (Istio #51883).
func (s *Supervisor) Drain(ctx context.Context) (bool, string) {
	r := &termEvent{preStop: true}
	if !s.toTermination(r) {
		// The proxy has exited: the actor that would answer has ended.
		if !s.life.everReady() {
			return true, control.NeverReady
		}
		return true, control.AlreadyStopping
	}
	run := r.answer.run
	if run == nil {
		return true, r.answer.word
	}
	select {
	case <-run.done:
	case <-ctx.Done():
	}
	// A drain that has ended is answered as ended, whether or not ctx
	// ended too: a select that finds both ready picks one at random, and
	// a wait of zero (ctx done on arrival) after the drain's end must not
	// answer still-draining.
	// One that the stop ended is answered as the stop below.
	if isClosed(run.done) && run.result.End != drain.Stopped {
		if run.result.Why != "" {
			return run.result.OK(), string(run.result.End) + ": " + run.result.Why
		}
		return run.result.OK(), string(run.result.End)
	}
	// The server ends the request's ctx when the supervisor stops (the
	// proxy exited mid-drain): that is no drain going on.
	if p, why := s.life.current(); p == Stopping || p == Exited {
		return false, control.Stopped + ": " + why
	}
	return false, control.StillDraining
}

// whyReadyNotTaken is why a proxy that its admin API says is ready is not, for
// every reader: its first readiness is refused (a stop came first), or not
// yet noted by the readiness actor.
func (s *Supervisor) whyReadyNotTaken() string {
	if why := s.life.neverReady(); why != "" {
		return why
	}
	return "proxy ready, not yet noted"
}

// healthReady is what /healthz/ready answers: ready, and not draining or
// stopping, since a pod on its way out must leave the endpoints.
func (s *Supervisor) healthReady() (bool, string) {
	st, _ := s.tracker.Status()
	p, why := s.life.current()
	switch {
	case p == Stopping || p == Exited:
		return false, p.String() + ": " + why
	// --drain-ready-until-hints: a Cilium before 1.19 drops a terminating
	// backend that turns not ready, and cuts its connections before a
	// close hint could tell their clients to go. drainRunning is nil once
	// the phase has moved on, and hintsOut true once the drain has ended.
	case p == Draining && (!s.cfg.DrainReadyUntilHints || s.life.drainRunning().hintsOut()):
		return false, "draining"
	case s.life.preStopBeforeReady():
		return false, "draining: a preStop came before the proxy was ready"
	case !st.Ready:
		return false, st.Reason
	case !s.life.everReady():
		return false, s.whyReadyNotTaken()
	}
	return true, ""
}

// healthLive is what /healthz/live answers: a proxy that was ready and has
// not answered its admin API for HungAfter is hung, and only a restart of
// the container ends that. It is live while starting (the startup probe's
// business), draining or stopping (a restart then would cut the drain
// short, and the stop is bounded anyway).
func (s *Supervisor) healthLive() (bool, string) {
	if p, _ := s.life.current(); p != Ready {
		return true, ""
	}
	hung, why := s.hung()
	return !hung, why
}

// hung reports whether a proxy that was ready has not answered its admin
// API for HungAfter, whatever the phase.
func (s *Supervisor) hung() (bool, string) {
	if s.cfg.HungAfter <= 0 {
		return false, ""
	}
	if d := s.tracker.Silence(); d > s.cfg.HungAfter {
		return true, fmt.Sprintf("the proxy's admin API has not answered for %v (bound %v)", d.Round(time.Second), s.cfg.HungAfter)
	}
	return false, ""
}

// Status returns the supervisor's state.
func (s *Supervisor) Status() control.Status {
	st, _ := s.tracker.Status()
	peers, verdict := s.book.Peers()
	v := s.life.snapshot()
	out := control.Status{
		State:    v.phase.String(),
		Ready:    st.Ready && !v.readyAt.IsZero(),
		Draining: v.draining,
		Peers:    peers,
		Pending:  verdict.Pending,
		Awaiting: verdict.Awaiting,
		Uptime:   s.cfg.Clock.Now().Sub(s.start).Seconds(),
		ProxyPID: s.proc.Pid(), // 0 until it is forked
	}
	switch {
	case !st.Ready:
		out.Reason = st.Reason
	case !out.Ready:
		out.Reason = s.whyReadyNotTaken()
	}
	if err := s.book.Replaced(); err != nil {
		out.RecordsError = err.Error()
	}
	if v.decided {
		out.ExitCode, out.DecidedBy = &v.code, v.decidedBy
	}
	return out
}
