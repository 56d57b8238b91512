package supervise

import (
	"context"
	"strings"
	"syscall"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The termination's part of the wiring: what the supervisor does when the
// peers' verdict settles, and how it runs the one drain of a termination
// (started by a preStop or SIGTERM, joined by the other).

// awaitVerdict acts once the completion records settle the job: the exit
// code is fixed and the proxy stopped, except for a native sidecar, whose
// end is the kubelet's SIGTERM. It then waits for the group's end, since its
// own end would end the group.
func (s *Supervisor) awaitVerdict(ctx context.Context) error {
	for {
		v, turn := s.book.Next()
		why := v.Why()
		switch {
		case v.Done:
			s.settle(ctx, v, why)
			<-ctx.Done()
			return nil
		case v.PodRestart != "":
			s.log.Info("the kubelet restarts every container of the pod; the proxy stays until its SIGTERM, which stops it at once", "reason", why)
		case v.Settled:
			s.log.Info("peers completed; the proxy stays until SIGTERM (a native sidecar, or --restart-policy Always)", "reason", why)
		}
		select {
		case <-turn:
		case <-ctx.Done():
			return nil
		}
	}
}

// settle acts on a verdict that stops the proxy. A failed peer may be the
// first sign of the pod's deletion, whose preStop or SIGTERM for the proxy
// is still on its way; the verdict then waits for them (deletionWait), and
// the first decides 0 (see decide) and ends the wait. A preStop that came
// meanwhile has started the drain: the proxy stops once it has ended, as
// on SIGTERM, so that the hook is not cut.
func (s *Supervisor) settle(ctx context.Context, v peers.Verdict, why string) {
	wait := s.deletionWait(v, time.Now())
	s.life.record(Event{Kind: PeersSettled, Code: v.Code, Peer: v.Failed, AwaitsDeletion: wait > 0})
	if wait > 0 {
		if v.Stop.IsZero() {
			s.log.Info("peer ended by SIGTERM; waiting for a pod deletion's preStop or SIGTERM before deciding the exit code",
				"peer", v.Failed, "window", wait)
		} else {
			s.log.Info("peer stopped from outside; waiting for the pod's termination to reach the proxy (its preStop or SIGTERM) before deciding the exit code",
				"peer", v.Failed, "exit_code", v.Code, "stop_signal", v.Stop.Signal, "stopped_at", v.Stop.At, "bound", wait)
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
			s.life.record(Event{Kind: DeletionWindowEnded, Code: v.Code, Peer: v.Failed})
		case <-s.life.decidedCh():
			// A preStop or SIGTERM decided: the pod terminates. Its
			// trigger decides before it starts its drain, so the drain may
			// not have started yet; start it here (the trigger joins it)
			// rather than stop the proxy under another peer's last
			// requests, or under the hook that is about to drain.
			if s.drain(why, true) == nil {
				s.stop(why)
			}
			return
		case <-ctx.Done():
			return
		}
	}
	// A drain under way (a pod deletion) is not cut short: another peer may
	// still be finishing through the proxy. Its end stops the proxy.
	if s.life.draining() && s.drain(why, true) != nil {
		return
	}
	s.stop(why)
}

// deletionWait is how long a verdict that stops the proxy waits, from now,
// for the pod's deletion to reach the proxy before the failed peer's code
// decides; zero: it decides at once. Only a final failure stops the proxy:
// under Never, or for a peer whose own policy (--peer-restart) the kubelet
// does not restart it by; it is the verdict's to say which.
//
// A peer that exec saw stopped from outside (v.Stop: the kubelet's stop
// signal, which exec forwarded) was stopped by the kubelet: on a pod's
// termination, when the kubelet reaches every container within the grace
// period (its preStop hook run, then its stop signal); or alone, on a
// failed liveness or startup probe, when nothing reaches the proxy. So the
// wait is bounded by the grace period from the app's stop signal, plus the
// deletion window for the kubelet's own stop call after a hook that took
// the whole period. The evidence decides, not a race: a busy kubelet's
// late hook still finds the proxy running. A stop time from the future
// (a skewed or lying report) counts from now.
//
// A peer killed by a SIGTERM without that evidence waits the deletion
// window, a guess (DefaultDeletionWindow).
func (s *Supervisor) deletionWait(v peers.Verdict, now time.Time) time.Duration {
	switch {
	case v.Failed == "":
		return 0
	case !v.Stop.IsZero():
		bound := s.cfg.GracePeriod + s.cfg.DeletionWindow
		return min(max(v.Stop.At.Add(bound).Sub(now), s.cfg.DeletionWindow), bound)
	case v.Reason == peers.Signaled && v.Code == 128+int(syscall.SIGTERM):
		return s.cfg.DeletionWindow
	}
	return 0
}

// drain starts the termination's drain, or joins the one under way, and
// returns it; nil when the proxy is already stopping. With thenStop the
// proxy stops when the drain ends; a SIGTERM that finds a preStop's drain
// ended already checks again first, within what is left of the bound, since
// the app may have opened connections since.
func (s *Supervisor) drain(trigger string, thenStop bool) *drainRun {
	run, isNew, stopOwner := s.life.beginDrain(trigger, thenStop)
	if run == nil {
		return nil
	}
	if isNew {
		run.started = s.cfg.Clock.Now()
		go s.runDrain(run, trigger)
	} else {
		s.log.Info("drain already started", "trigger", trigger)
	}
	if stopOwner {
		ended := !isNew && isClosed(run.done)
		go func() {
			<-run.done
			if ended {
				s.recheckDrain(run, trigger)
			}
			s.stop(trigger)
		}()
	}
	return run
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// drainConfig is the drain's config for one trigger.
func (s *Supervisor) drainConfig(trigger string) drain.Config {
	// --drain-min keeps Envoy accepting while the pod leaves the endpoints
	// and its app still serves. A native sidecar's drain ends nothing: its
	// end is the kubelet's SIGTERM, once the app has gone (native.go).
	minimum := s.cfg.DrainMin
	if s.cfg.Policy.Native {
		minimum = 0
	}
	return drain.Config{
		Admin:           s.cfg.Admin,
		Watch:           func() drain.Watch { return s.scanner.Watch() },
		Owner:           s.cfg.Owner,
		Min:             minimum,
		Timeout:         s.cfg.DrainTimeout,
		Delay:           s.cfg.DrainDelay,
		Call:            s.drainCallFor,
		HealthcheckFail: s.cfg.DrainHealthcheckFail,
		Running:         s.book.Running,
		Tick:            s.cfg.Intervals.DrainTick,
		StatsEvery:      s.cfg.Intervals.DrainStats,
		Progress:        s.cfg.Intervals.DrainProgress,
		Quiet:           s.cfg.Intervals.DrainQuiet,
		Clock:           s.cfg.Clock,
		Log:             s.log.With("trigger", trigger),
	}
}

// learnedPorts are Envoy's listeners' ports learned when it was ready.
func (s *Supervisor) learnedPorts() []uint16 {
	if p := s.envoyPorts.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Supervisor) runDrain(run *drainRun, trigger string) {
	run.result = drain.Run(s.drainConfig(trigger), s.learnedPorts(), s.book.Settled())
	s.m.drained(run.result)
	close(run.done)
}

// recheckDrain waits again for the drain's condition, within what is left
// of the first drain's bound: the listeners are drained already.
func (s *Supervisor) recheckDrain(run *drainRun, trigger string) {
	cfg := s.drainConfig(trigger)
	cfg.Recheck = true
	cfg.Timeout = max(run.started.Add(s.cfg.DrainTimeout).Sub(s.cfg.Clock.Now()), 0)
	drain.Run(cfg, s.learnedPorts(), s.book.Settled())
}

// drainCallFor is the drain call for Envoy's release: the one learned at
// ready, or, until the release has been read, ChooseCall's for an unknown
// one, with the release asked again within ctx. A release read here is
// learned for good.
func (s *Supervisor) drainCallFor(ctx context.Context) (drain.Call, bool) {
	if c := s.drainCall.Load(); c != nil {
		return *c, true
	}
	info, err := s.cfg.Admin.ServerInfo(ctx)
	v := info.Version
	if err != nil {
		return drain.ChooseCall(v, false, s.cfg.DrainInboundOnly), false
	}
	call := drain.ChooseCall(v, true, s.cfg.DrainInboundOnly)
	if !s.drainCall.CompareAndSwap(nil, &call) {
		return *s.drainCall.Load(), true
	}
	attrs := []any{"envoy", v.String(), "call", call.String()}
	if len(call.GivesUp) == 0 {
		s.log.Info("drain call chosen", attrs...)
	} else {
		s.log.Warn("drain call chosen; this Envoy cannot give every aim of a drain", append(attrs, "gives_up", strings.Join(call.GivesUp, "; "))...)
	}
	if risk := drain.DrainTimeRisk(v, call, info.DrainTime, s.cfg.DrainTimeout); risk != "" {
		s.log.Warn("Envoy's --drain-time-s is short for the drain's bound", "envoy", v.String(), "drain_time", info.DrainTime, "drain_timeout", s.cfg.DrainTimeout, "effect", risk)
	}
	return call, true
}

// learnDrainCall reads Envoy's release once it is ready, so that a drain
// has its call even if the admin API is slow by then. A release that
// cannot be read is said once here; each drain asks again.
func (s *Supervisor) learnDrainCall(group context.Context) {
	ctx, cancel := context.WithTimeout(group, time.Second)
	defer cancel()
	call, known := s.drainCallFor(ctx)
	// A proxy being stopped stops answering: that says nothing of its
	// release, and no drain will need the call.
	if phase, _ := s.life.current(); known || group.Err() != nil || phase >= Stopping {
		return
	}
	s.log.Warn("Envoy's release unreadable; drain call chosen for an unknown one until it is read",
		"call", call.String(), "gives_up", strings.Join(call.GivesUp, "; "))
}
