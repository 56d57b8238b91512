package supervise

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
)

// The termination actor: the one goroutine that decides when and how the
// proxy stops. Everything that may end the proxy's life is an event it
// receives (a stop signal, the preStop hook, the peers' verdict, the end of
// the drain, a window or bound elapsing on the supervisor's clock, another
// actor's end, the proxy's exit) and it alone calls stop. Its state is its
// own, read and written by no other goroutine; the lifecycle keeps what
// others read (the phase, the exit code, the drain under way).
//
// It is the group's proxy actor: it returns once the proxy has exited (and
// what its leader left in its group is gone), and that ends the group.

// termEvent is an event from another goroutine: a stop signal, the preStop
// hook, or the group's end. Its sender waits until the actor has acted on
// it (handled), so that what the event decided (the exit code, the drain)
// is there to read when the sender goes on.
type termEvent struct {
	sig      syscall.Signal // a stop signal: SIGTERM, SIGINT or SIGQUIT
	preStop  bool
	shutdown bool // another actor ended the group

	answer  preStopAnswer // preStop: what the hook is told, set by the actor
	handled chan struct{}
}

// preStopAnswer is the actor's answer to a preStop: the drain to wait on,
// or, when nil, the word the hook returns at once.
type preStopAnswer struct {
	run  *drainRun
	word string
}

// termination is the termination actor: its methods run on its goroutine
// alone (loop), and its fields are its own, read and written by no other.
// It reaches the supervisor's parts (the lifecycle, the proxy, the book,
// the config) through the embedded Supervisor, whose methods never reach
// back into it but through toTermination.
type termination struct {
	*Supervisor
	clk clock.Clock

	verdictTurn <-chan struct{} // the book's next verdict; nil once done

	// The deletion wait: a verdict whose failed peer may be the first sign
	// of the pod's deletion (deletionWait).
	deletion        clock.Timer // nil unless waiting
	awaitingVerdict string      // the verdict's why, while waiting
	deletionPeer    string      // the failed peer, and its code
	deletionCode    int

	// The restart hold: a native sidecar's SIGTERM while the app runs.
	restartHold clock.Timer
	holdWhy     string

	// The drain's end: stopWhenDrained says the proxy stops then, by
	// stopTrigger (a SIGTERM, not only a preStop).
	run             *drainRun // the termination's one drain, once started
	drainDone       <-chan struct{}
	stopWhenDrained bool
	stopTrigger     string
	recheckDone     chan struct{} // a SIGTERM's re-check of an ended drain
	// drainCtx is every drain's; endDrains ends it once the stop is
	// decided, and the actor waits for them before its end, so that no
	// drain outlives the proxy: it would ask Envoy, and the book the
	// supervisor closes, after both have gone.
	drainCtx  context.Context
	endDrains context.CancelFunc
	// A preStop before the first readiness: the drain starts once the
	// proxy is ready (readiedCh), if it ever is.
	readiedAfterPreStop <-chan struct{}

	// What the proxy's leader left in its group, held until the drain
	// ends (leaderExited).
	leaderExit *reaper.Exit
	left       <-chan struct{} // closed once nothing of the group is left
	remains    <-chan struct{} // left, until it has been acted on
	leftDone   chan struct{}   // closed once StopLeft has returned
}

// timerC is t's channel, nil (never ready) for no timer.
func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// toTermination hands r to the actor and waits until it has acted on it.
// It reports false when the actor has ended: the proxy has exited, and
// nothing is left to decide.
func (s *Supervisor) toTermination(r *termEvent) bool {
	r.handled = make(chan struct{})
	select {
	case s.termEvents <- r:
	case <-s.terminated:
		return false
	}
	<-r.handled
	return true
}

// loop is the termination actor. It runs from the fork until the
// proxy's exit.
func (t *termination) loop() error {
	defer close(t.terminated)
	t.drainCtx, t.endDrains = context.WithCancel(context.Background())
	defer t.joinDrains()
	exited := make(chan reaper.Exit, 1)
	go func() { exited <- t.proc.Wait() }()
	t.verdictChanged()
	for {
		select {
		case r := <-t.termEvents:
			t.handle(r)
			close(r.handled)
		case <-t.verdictTurn:
			t.verdictChanged()
		case <-timerC(t.deletion):
			t.deletionWindowEnded()
		case <-timerC(t.restartHold):
			t.restartHold = nil
			t.stop(t.holdWhy)
		case <-t.drainDone:
			t.drainEnded()
		case <-t.readiedAfterPreStop:
			t.readiedAfterPreStop = nil
			t.log.Info("the proxy is ready after a preStop: draining at once")
			t.drain("preStop before the proxy was ready", false)
		case <-t.recheckDone:
			t.recheckDone = nil
			t.stop(t.stopTrigger)
		case e := <-exited:
			if !t.leaderExited(e) {
				t.proxyExited(e)
				return nil
			}
		case <-t.remains:
			t.remains = nil
			t.log.Warn("what the proxy's leader left in its group exited during the drain")
			t.stop("the drain ended after the proxy's leader exited")
		case <-t.leftDone:
			if isClosed(t.left) { // else SIGKILLed; KillLeftovers kills it again, and the PID namespace ends with us
				t.log.Info("nothing the proxy's leader left in its group runs any more")
			}
			t.proxyExited(*t.leaderExit)
			return nil
		}
		t.deletionDecided()
	}
}

// handle acts on an event from another goroutine.
func (t *termination) handle(r *termEvent) {
	switch {
	case r.shutdown:
		t.stop("shutting down")
	case r.preStop:
		r.answer = t.preStop()
	case r.sig == syscall.SIGQUIT:
		// The operator's emergency exit: no drain, no grace.
		t.life.record(Event{Kind: Signal, Signal: r.sig})
		t.life.move(Stopping, "SIGQUIT")
		t.log.Warn("killing the proxy's group at once", "reason", "SIGQUIT", "pgid", t.proc.Pid())
		t.proc.Kill()
		t.book.Unwatch()
	default:
		t.stopSignal(r.sig)
	}
}

// stopSignal is SIGTERM's (or SIGINT's) way out: drain, then stop. Before
// the proxy was ever ready there is nothing to drain, and it stops at once.
func (t *termination) stopSignal(sig syscall.Signal) {
	name := unix.SignalName(sig)
	if ready := t.life.record(Event{Kind: Signal, Signal: sig}); !ready {
		t.stop(name + " before the proxy was ever ready")
		return
	}
	if t.cfg.Policy.Native {
		t.nativeTerminate(name)
		return
	}
	if t.drain(name, true) == nil {
		t.log.Info("already stopping", "signal", name)
	}
}

// preStop is the hook's drain: started, or joined (a kubelet that restarts
// replays the hook). A proxy that is already stopping has nothing left to
// drain, and one that was never ready has carried no traffic to drain: the
// hook returns at once, so that the pod's termination is not held up by a
// proxy that cannot start (Istio #51883). Should that proxy become ready
// after all, the drain starts then, and the kubelet is never told it is
// ready: a sidecar restarted during the pod's termination (KEP-4438) gets
// its preStop again, maybe before its proxy is up, and must go straight
// back to draining.
func (t *termination) preStop() preStopAnswer {
	if ready := t.life.record(Event{Kind: PreStop}); !ready {
		t.log.Info("preStop before the proxy was ever ready: nothing to drain yet; the drain starts if it becomes ready")
		t.readiedAfterPreStop = t.life.readiedCh()
		return preStopAnswer{word: control.NeverReady}
	}
	run := t.drain("preStop", false)
	switch {
	case run == nil:
		return preStopAnswer{word: control.AlreadyStopping}
	case t.cfg.Policy.Native:
		// The kubelet holds a native sidecar's SIGTERM until the app has
		// exited: waiting here too would only put it off (see native.go).
		return preStopAnswer{word: control.NativeSidecar}
	}
	return preStopAnswer{run: run}
}

// verdictChanged reads the peers' verdict at each turn of the book. Once it
// settles the job, the exit code is fixed and the proxy stopped (once no
// peer runs under exec: stopAfterVerdict), except for a native sidecar,
// whose end is the kubelet's SIGTERM.
func (t *termination) verdictChanged() {
	v, turn := t.book.Next()
	t.verdictTurn = turn
	why := v.Why()
	switch {
	case v.Done:
		t.verdictTurn = nil
		t.verdictDone(v, why)
	case v.PodRestart != "":
		t.log.Info("the kubelet restarts every container of the pod; the proxy stays until its SIGTERM, which stops it at once", "reason", why)
	case v.Settled:
		t.log.Info("peers completed; the proxy stays until SIGTERM (a native sidecar, or --restart-policy Always)", "reason", why)
	}
}

// stopAfterVerdict stops the proxy for a verdict whose code is fixed
// already, but never under a peer that still runs under exec: under Never
// one peer's failure settles the verdict while another may still be
// sending through the proxy, and so may a success under --peers N while
// another peer runs. The stop then waits as a drain waits for settled
// peers (drain.PeersEnded, the one rule): the verdict starts the
// termination's drain, or joins the one under way (a pod deletion's),
// which ends once no peer runs under exec, within the drain's bound, and
// its end stops the proxy. With no peer running, and no drain under way,
// it stops at once, as it does before the proxy was ever ready (it carried
// no traffic) and once it is stopping.
func (t *termination) stopAfterVerdict(why string) {
	if phase, _ := t.life.current(); phase == Ready {
		ended, n, err := drain.PeersEnded(t.book.Running)
		if ended {
			t.stop(why)
			return
		}
		attrs := []any{"reason", why, "drain_timeout", t.cfg.DrainTimeout}
		if err != nil {
			attrs = append(attrs, "peers_err", err)
		} else {
			attrs = append(attrs, "peers_running", n)
		}
		t.log.Info("the exit code is fixed, but a peer may still run under exec; the proxy stops once none does, within the drain's bound", attrs...)
	}
	if t.drain(why, true) != nil {
		return
	}
	t.stop(why)
}

// drain starts the termination's drain, or joins the one under way, and
// returns it; nil when the proxy is already stopping. With thenStop the
// proxy stops when the drain ends; a SIGTERM that finds a preStop's drain
// ended already checks again first, within what is left of the bound,
// since the app may have opened connections since.
func (t *termination) drain(trigger string, thenStop bool) *drainRun {
	run, isNew := t.life.beginDrain(trigger)
	if run == nil {
		return nil
	}
	if isNew {
		run.started = t.clk.Now()
		t.run, t.drainDone = run, run.done
		go t.runDrain(run, trigger)
	} else {
		t.log.Info("drain already started", "trigger", trigger)
	}
	if !thenStop || t.stopWhenDrained {
		return run
	}
	t.stopWhenDrained, t.stopTrigger = true, trigger
	if !isNew && isClosed(run.done) {
		done := make(chan struct{})
		t.recheckDone = done
		go func() {
			defer close(done)
			t.recheckDrain(run, trigger)
		}()
	}
	return run
}

// joinDrains ends the drains and waits for them: the actor's last act.
func (t *termination) joinDrains() {
	t.endDrains()
	if t.run != nil {
		<-t.run.done
	}
	if t.recheckDone != nil {
		<-t.recheckDone
	}
}

// drainEnded: the drain's end stops the proxy if a SIGTERM asked for it,
// or what the proxy's leader left, held for the drain.
func (t *termination) drainEnded() {
	t.drainDone = nil
	switch {
	case t.leaderExit != nil:
		t.log.Info("drain ended; stopping what the proxy's leader left in its group", "end", string(t.run.result.End))
		t.stop("the drain ended after the proxy's leader exited")
	case t.stopWhenDrained:
		t.stop(t.stopTrigger)
	}
}

// stop moves to Stopping and starts the proxy's stop sequence (or, once
// its leader has exited by itself, the sequence against what it left),
// once.
func (t *termination) stop(why string) {
	if t.restartHold != nil {
		t.restartHold.Stop()
		t.restartHold = nil
	}
	moved := false
	if _, ok := t.life.move(Stopping, why); ok {
		moved = true
		t.log.Info("stop requested", "reason", why)
		t.book.Unwatch()
		t.endDrains()
	}
	if t.leaderExit == nil {
		if moved {
			t.proc.Stop()
		}
		return
	}
	if t.leftDone != nil {
		return
	}
	done := make(chan struct{})
	t.leftDone = done
	go func() {
		defer close(done)
		t.proc.StopLeft(t.left)
	}()
}

// leaderExited acts on the proxy leader's exit. It reports whether the
// actor holds on for what the leader left in its group: an Envoy whose
// pilot-agent exited by itself in the middle of the drain still carries
// the app's requests, and killing it with the group would cut them while
// the app runs and the drain's bound has not passed. pilot-agent 1.28 to
// 1.30 panics when its drain POST fails (istio#60494). The exit is recorded
// at once, and replaces the deletion's 0 (decision.take). When the drain
// ends (or what was left exits by itself, or a stop is decided: a native
// sidecar's SIGTERM once the app has gone, SIGQUIT), what is left is
// stopped as the proxy is: /quitquitquit, SIGTERM, SIGKILL.
func (t *termination) leaderExited(e reaper.Exit) (hold bool) {
	envoyUp := t.checkEnvoyAtExit()
	// A preStop's drain that has ended leaves the phase at Draining until
	// the SIGTERM: past its end, nothing is left to hold for.
	if run := t.life.drainRunning(); run == nil || isClosed(run.done) {
		return false
	}
	t.life.record(Event{Kind: ProxyExit, Code: e.Code(), MidDrain: true, FailOnEnvoyDeath: t.cfg.FailOnEnvoyDeath, Pending: t.pendingUnderOnFailure()})
	if !envoyUp {
		return false
	}
	t.log.Warn("the proxy's leader exited by itself in the middle of the drain; Envoy, left in its group, carries the app's traffic until the drain ends",
		"pid", t.proc.Pid(), "status", e.String())
	t.leaderExit = &e
	t.left = t.proc.Remains()
	t.remains = t.left
	return true
}

// proxyExited is the proxy's end, and the actor's.
func (t *termination) proxyExited(e reaper.Exit) {
	// Before the group is killed: what the tracker sees after this is the
	// kill, not a death.
	t.tracker.Gone("proxy exited")
	t.proc.KillLeftovers()
	from, _ := t.life.move(Exited, e.String())
	asked := from == Stopping
	t.m.exits.With(fmt.Sprint(e.Code())).Inc()
	t.life.record(Event{Kind: ProxyExit, Code: e.Code(), Asked: asked, FailOnEnvoyDeath: t.cfg.FailOnEnvoyDeath, Pending: t.pendingUnderOnFailure()})

	v := t.life.snapshot()
	attrs := []any{"pid", t.proc.Pid(), "status", e.String(), "code", e.Code(), "exit_code", v.code, "decided_by", v.decidedBy}
	if !v.envoyDown.IsZero() && !asked {
		attrs = append(attrs, "envoy_died_at", v.envoyDown.Format(time.RFC3339Nano))
	}
	t.log.Info("proxy exited", attrs...)
	if at := t.book.SettledAt(); !at.IsZero() {
		t.m.completionTo.Set(t.clk.Now().Sub(at).Seconds())
	}
}

// pendingUnderOnFailure reports whether an exit 0 of the proxy's container
// would leave a pending peer without a proxy: under the pod's OnFailure the
// kubelet restarts a classic sidecar, a regular container, only after a
// non-zero code, while the verdict is not settled (a peer runs, has not
// reported, or failed and awaits its restart). A native sidecar is
// restarted whatever its code, and under Never or Always the code changes
// no restart, so there the proxy's own code stands.
func (t *termination) pendingUnderOnFailure() bool {
	p := t.cfg.Policy
	return p.Restart == peers.OnFailure && !p.Native && !t.book.Verdict().Settled
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
