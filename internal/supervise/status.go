package supervise

import (
	"context"
	"time"
)

// WaitReady is GET /v1/ready. It answers for the app: can the proxy carry its
// traffic? So it stays true during a drain, when outbound traffic still flows;
// only /healthz/ready flips then.
func (s *Supervisor) WaitReady(ctx context.Context) (bool, string) {
	for {
		st, changed := s.tracker.Status()
		// DRAINING during our drain is our own /healthcheck/fail
		// (--drain-healthcheck-fail): Envoy still carries the app's traffic.
		if st.Ready || st.Reason == "DRAINING" && s.draining() {
			return true, ""
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false, st.Reason
		}
	}
}

func (s *Supervisor) draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drain != nil
}

// Status is GET /v1/status.
type Status struct {
	State     string                `json:"state"`
	ProxyPID  int                   `json:"proxy_pid"`
	Ready     bool                  `json:"ready"`
	Reason    string                `json:"reason,omitempty"`
	Draining  bool                  `json:"draining"`
	Peers     map[string]peerStatus `json:"peers"`
	Pending   []string              `json:"pending,omitempty"`
	Awaiting  int                   `json:"awaiting"`
	ExitCode  *int                  `json:"exit_code,omitempty"` // once fixed
	DecidedBy string                `json:"decided_by,omitempty"`
	Uptime    float64               `json:"uptime_seconds"`
}

// Status returns the supervisor's state.
func (s *Supervisor) Status() any {
	st, _ := s.tracker.Status()
	peers, pending, awaiting := s.peerStatuses()
	s.mu.Lock()
	out := Status{
		ProxyPID: s.pid,
		Ready:    st.Ready,
		Draining: s.drain != nil,
		Peers:    peers,
		Pending:  pending,
		Awaiting: awaiting,
		Uptime:   time.Since(s.start).Seconds(),
	}
	stopping := s.stopping
	s.mu.Unlock()
	if !st.Ready {
		out.Reason = st.Reason
	}
	switch {
	case s.waitExit(0):
		out.State = "exited"
	case stopping:
		out.State = "stopping"
	case out.Draining:
		out.State = "draining"
	case st.Ready:
		out.State = "ready"
	default:
		out.State = "starting"
	}
	if s.out.decided() {
		code, by := s.out.get()
		out.ExitCode, out.DecidedBy = &code, by
	}
	return out
}
