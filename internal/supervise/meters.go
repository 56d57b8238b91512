package supervise

import (
	"sync"
	"syscall"

	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
	"github.com/proxy-supervisor/proxy-supervisor/internal/metrics"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// meters are the supervisor's metrics, served on the health server's /metrics.
type meters struct {
	reg          *metrics.Registry
	state        metrics.Vec
	ready        *metrics.Value
	readyChanges *metrics.Value
	exits        metrics.Vec
	signals      metrics.Vec
	sigkills     *metrics.Value
	completions  metrics.Vec
	failures     metrics.Vec
	completionTo *metrics.Value
	drains       metrics.Vec
	drainSeconds *metrics.Value
	phaseMu      sync.Mutex
	shown        Phase // the phase the state gauge shows
}

func newMeters(s *Supervisor) *meters {
	r := metrics.NewRegistry()
	b := s.cfg.Build
	r.GaugeVec("proxy_supervisor_build_info", "1, with the version, commit, build date and Go release of the binary as labels.",
		"version", "commit", "date", "goversion").With(b.Version, b.Commit, b.Date, b.GoVersion).Set(1)
	m := &meters{
		reg:          r,
		state:        r.GaugeVec("proxy_supervisor_state", "The lifecycle state: 1 for the current one.", "state"),
		ready:        r.Gauge("proxy_supervisor_proxy_ready", "1 while the admin API says the proxy is ready."),
		readyChanges: r.Counter("proxy_supervisor_ready_transitions_total", "Changes of the proxy's readiness."),
		exits:        r.CounterVec("proxy_supervisor_proxy_exits_total", "Exits of the proxy by exit code (128+N for signal N). The supervisor never restarts the proxy; the kubelet restarts the container.", "code"),
		signals:      r.CounterVec("proxy_supervisor_signals_total", "Signals received.", "signal"),
		sigkills:     r.Counter("proxy_supervisor_sigkill_escalations_total", "Stops that needed SIGKILL."),
		completions:  r.CounterVec("proxy_supervisor_peer_completions_total", "Final completion records by peer and outcome: succeeded, failed (exited non-zero), signaled, not-ready or lost.", "peer", "outcome"),
		failures:     r.CounterVec("proxy_supervisor_peer_failures_total", "Failed completions by peer.", "peer"),
		completionTo: r.Gauge("proxy_supervisor_completion_to_exit_seconds", "From the records settling the job to the proxy's exit."),
		drains:       r.CounterVec("proxy_supervisor_drains_total", "Drains by how they ended: drained, timeout, peers-completed or stopped.", "end"),
		drainSeconds: r.Gauge("proxy_supervisor_drain_duration_seconds", "Duration of the last drain."),
	}
	r.CounterFunc("proxy_supervisor_zombies_reaped_total", "Exited processes reaped that were not the proxy (orphans).",
		func() float64 { return float64(s.reaper.Orphans()) })
	r.GaugeFunc("proxy_supervisor_uptime_seconds", "Seconds since the supervisor started.",
		func() float64 { return s.cfg.Clock.Now().Sub(s.start).Seconds() })
	return m
}

// setPhase is the lifecycle's, and only the lifecycle's, to call, once its
// lock is released; moves told out of order (two goroutines' moves) are
// shown in order, since phases only move forward.
func (m *meters) setPhase(now Phase) {
	m.phaseMu.Lock()
	defer m.phaseMu.Unlock()
	if now < m.shown {
		return
	}
	m.shown = now
	for p := Starting; p <= Exited; p++ {
		v := 0.0
		if p == now {
			v = 1
		}
		m.state.With(p.String()).Set(v)
	}
}

func (m *meters) readyChanged(ready bool) {
	m.readyChanges.Inc()
	if ready {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

func (m *meters) escalated(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		m.sigkills.Inc()
	}
}

// recorded counts a final record by its outcome, not by its code and
// reason: the names are bounded (completion.NameLimit), but a client may
// post every code under each, and a series per code grew /metrics to 3 MB
// and the supervisor's memory by 22 MB for good. The code is in the log.
func (m *meters) recorded(r peers.Record) {
	m.completions.With(r.Name, outcome(r)).Inc()
	if r.Failed() {
		m.failures.With(r.Name).Inc()
	}
}

func (m *meters) drained(r drain.Result) {
	m.drainSeconds.Set(r.Took.Seconds())
	m.drains.With(string(r.End)).Inc()
}

// outcome is a final record's label: its reason, with an exit told apart
// as a success or a failure.
func outcome(r peers.Record) string {
	switch {
	case r.Succeeded():
		return "succeeded"
	case r.Reason == peers.Exited || r.Reason == "":
		return "failed"
	}
	return string(r.Reason)
}
