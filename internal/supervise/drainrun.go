package supervise

import (
	"context"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
)

// The termination's drain: its config, its run, the re-check of a drain
// that ended before SIGTERM, and what it learns from Envoy. When it starts
// and what its end means is the termination actor's (termination.go).

// drainConfig is the drain's config for one trigger.
func (t *termination) drainConfig(trigger string) drain.Config {
	// --drain-min keeps Envoy accepting while the pod leaves the endpoints
	// and its app still serves. A native sidecar's drain ends nothing: its
	// end is the kubelet's SIGTERM, once the app has gone (native.go).
	minimum := t.cfg.DrainMin
	if t.cfg.Policy.Native {
		minimum = 0
	}
	return drain.Config{
		Admin:           t.admin,
		OpenScanner:     func() drain.OpenScanner { return t.scanner.Open() },
		Owner:           t.owner,
		Min:             minimum,
		Timeout:         t.cfg.DrainTimeout,
		Delay:           t.cfg.DrainDelay,
		Call:            t.drainCallFor,
		HealthcheckFail: t.cfg.DrainHealthcheckFail,
		Running:         t.book.Running,
		Tick:            t.cfg.Intervals.DrainTick,
		StatsEvery:      t.cfg.Intervals.DrainStats,
		Progress:        t.cfg.Intervals.DrainProgress,
		Quiet:           t.cfg.Intervals.DrainQuiet,
		Clock:           t.cfg.Clock,
		Log:             t.log.With("trigger", trigger),
	}
}

// learnedPorts are Envoy's listeners' ports learned when it was ready.
func (s *Supervisor) learnedPorts() []uint16 {
	if p := s.envoyPorts.Load(); p != nil {
		return *p
	}
	return nil
}

func (t *termination) runDrain(run *drainRun, trigger string) {
	cfg := t.drainConfig(trigger)
	cfg.Hinted = func() { run.hinted.Store(true) }
	run.result = drain.Run(t.drainCtx, cfg, t.learnedPorts(), t.book.Settled())
	t.m.drained(run.result)
	close(run.done)
}

// hintsOut reports whether the drain's close hints have gone out, or no
// longer can: it has ended, or there is none (nil). Until then
// --drain-ready-until-hints keeps readiness as it was before the drain.
func (r *drainRun) hintsOut() bool {
	return r == nil || r.hinted.Load() || isClosed(r.done)
}

// recheckDrain waits again for the drain's condition, within what is left
// of the first drain's bound: the listeners are drained already.
func (t *termination) recheckDrain(run *drainRun, trigger string) {
	cfg := t.drainConfig(trigger)
	cfg.Recheck = true
	cfg.Timeout = max(run.started.Add(t.cfg.DrainTimeout).Sub(t.cfg.Clock.Now()), 0)
	drain.Run(t.drainCtx, cfg, t.learnedPorts(), t.book.Settled())
}

// drainCallFor is the drain call for Envoy's release: the one learned at
// ready, or, until the release has been read, ChooseCall's for an unknown
// one, with the release asked again within ctx. A release read here is
// learned for good.
func (s *Supervisor) drainCallFor(ctx context.Context) (drain.Call, bool) {
	if c := s.drainCall.Load(); c != nil {
		return *c, true
	}
	info, err := s.admin.ServerInfo(ctx)
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
	ctx, cancel := clock.WithTimeout(group, s.cfg.Clock, time.Second)
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

// learnAtReady, once the proxy is first ready, learns what a drain will
// need from Envoy (its listeners' ports, and the drain call its release
// takes), so that a drain has it even if the admin API is slow by then.
//
// One after the other, the ports first (every drain needs them; a drain
// that finds no call asks for one itself): at once, the two would open a
// third connection to the admin API beside the tracker's, whose buffers an
// idle supervisor, collected rarely, keeps resident.
func (s *Supervisor) learnAtReady(ctx context.Context) {
	select {
	case <-s.life.readiedCh():
	case <-ctx.Done():
		return
	}
	s.learnEnvoyPorts(ctx)
	s.learnDrainCall(ctx)
}

// learnEnvoyPorts remembers the ports of Envoy's listeners.
func (s *Supervisor) learnEnvoyPorts(ctx context.Context) {
	pctx, cancel := clock.WithTimeout(ctx, s.cfg.Clock, 2*time.Second)
	defer cancel()
	ports, err := s.admin.ListenerPorts(pctx)
	phase, _ := s.life.current()
	switch {
	case ctx.Err() != nil:
		return // the group ended first: no drain will want them
	case err != nil && phase >= Stopping:
		// A proxy being stopped stops answering (a native sidecar's
		// SIGTERM a millisecond after its first readiness): that says
		// nothing of Envoy, and no drain will want the ports.
		return
	case err != nil:
		s.log.Warn("admin /listeners failed; Envoy's ports will be read at drain", "err", err)
		return
	}
	s.envoyPorts.Store(&ports)
}
