package supervise

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The state moves starting -> ready -> draining -> exited, and GET
// /v1/status shows it with the peers and, once fixed, the exit code.
func TestStatusThroughTheLifecycle(t *testing.T) {
	const initDelay = 600 * time.Millisecond
	var healthPort uint16
	h := startSupervisor(t, func(h *harness, c *Config) {
		c.Policy = peers.Policy{Names: []string{"job", "uploader"}}
		healthPort = proctest.FreePort(t)
		c.HealthAddr = fmt.Sprintf("127.0.0.1:%d", healthPort)
	}, "--init-delay", initDelay.String())
	readyURL := fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", healthPort)

	// starting
	h.eventually("the control socket answers", func() bool {
		_, err := h.client.Status(t.Context())
		return err == nil
	})
	m := h.statusJSON()
	if m["state"] != "starting" || m["ready"] != false || m["draining"] != false {
		t.Errorf("at start: %v; want state starting, not ready, not draining", m)
	}
	if pid, _ := m["proxy_pid"].(float64); pid <= 0 {
		t.Errorf("at start: proxy_pid %v", m["proxy_pid"])
	}
	if r, _ := m["reason"].(string); r == "" {
		t.Errorf("at start: no reason for not being ready: %v", m)
	}
	if _, ok := m["exit_code"]; ok {
		t.Errorf("at start: exit_code before anything decided it: %v", m)
	}
	if m["awaiting"] != 2.0 || fmt.Sprint(m["pending"]) != "[job uploader]" {
		t.Errorf("at start: awaiting %v, pending %v; want 2, [job uploader]", m["awaiting"], m["pending"])
	}
	if code := httpStatus(t, readyURL); code != 503 {
		t.Errorf("/healthz/ready while starting: %d, want 503", code)
	}
	// GET /v1/ready long-polls: it answers as soon as the proxy is ready.
	if ok, _, err := h.client.Ready(t.Context(), 50*time.Millisecond); err != nil || ok {
		t.Errorf("GET /v1/ready?wait=50ms while starting: %v, %v; want not ready", ok, err)
	}

	// ready
	ok, _, err := h.client.Ready(t.Context(), 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("GET /v1/ready?wait=10s: %v, %v", ok, err)
	}
	if took := time.Since(h.started); took < initDelay || took > initDelay+time.Second {
		t.Errorf("ready after %v; the fake Envoy is LIVE after %v and the tracker polls every 10 ms", took, initDelay)
	}
	h.waitReady()
	m = h.statusJSON()
	if m["state"] != "ready" || m["ready"] != true {
		t.Errorf("once ready: %v", m)
	}
	if _, ok := m["reason"]; ok {
		t.Errorf("once ready: a reason for not being ready: %v", m)
	}
	if code := httpStatus(t, readyURL); code != 200 {
		t.Errorf("/healthz/ready once ready: %d, want 200", code)
	}

	h.post("job", 0, "")
	m = h.statusJSON()
	if m["awaiting"] != 1.0 || fmt.Sprint(m["pending"]) != "[uploader]" {
		t.Errorf("after job: awaiting %v, pending %v; want 1, [uploader]", m["awaiting"], m["pending"])
	}
	peersJSON, _ := m["peers"].(map[string]any)
	job, _ := peersJSON["job"].(map[string]any)
	if job["exit_code"] != 0.0 || job["reason"] != "exited" || job["running"] != false {
		t.Errorf("after job: peers %v", m["peers"])
	}

	// draining
	ln := h.listenApp()
	drained := make(chan bool, 1)
	go func() {
		ok, _ := h.s.Drain(context.Background())
		drained <- ok
	}()
	h.eventually("the drain started", func() bool { return h.status().Draining })
	m = h.statusJSON()
	if m["state"] != "draining" || m["draining"] != true || m["ready"] != true {
		t.Errorf("during the drain: %v; want draining and still ready", m)
	}
	// A preStop once the proxy was ready is pod deletion: it fixes 0, and
	// the app's failure while it is being deleted does not change that.
	if m["exit_code"] != 0.0 || m["decided_by"] != "preStop" {
		t.Errorf("during the drain: exit_code %v, decided_by %v; want 0, preStop", m["exit_code"], m["decided_by"])
	}

	// The last peer settles the job: the drain ends and the proxy stops.
	// (In-process from here: the socket closes when the proxy has exited.)
	h.complete("uploader", 2, "")
	st := h.status()
	if st.Pending != nil || st.Awaiting != 0 {
		t.Errorf("once settled: pending %v, awaiting %v; want none", st.Pending, st.Awaiting)
	}
	if p := st.Peers["uploader"]; p.ExitCode == nil || *p.ExitCode != 2 || p.Running {
		t.Errorf("peer uploader: %+v, want exit code 2", p)
	}
	if st.ExitCode == nil || *st.ExitCode != 0 || st.DecidedBy != "preStop" {
		t.Errorf("after the failure: exit code %v, decided by %q; want the preStop's 0", st.ExitCode, st.DecidedBy)
	}
	select {
	case ok := <-drained:
		if !ok {
			t.Error("the drain ended unsuccessfully")
		}
	case <-time.After(2 * time.Second):
		t.Error("completion did not end the drain")
	}
	ln.Close()
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}

	// exited
	s := h.status()
	if s.State != "exited" || s.Ready || s.ExitCode == nil || *s.ExitCode != 0 {
		t.Errorf("after Run: state %q, ready %v, exit code %v; want exited, not ready, 0", s.State, s.Ready, s.ExitCode)
	}
	if s.Uptime <= 0 {
		t.Errorf("uptime %v", s.Uptime)
	}
}

// WaitReady answers false with the reason while the proxy is not ready, and
// true as soon as it is.
func TestWaitReady(t *testing.T) {
	h := startSupervisor(t, nil, "--stay-initializing")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	ok, why := h.s.WaitReady(ctx)
	cancel()
	if ok || why == "" {
		t.Fatalf("WaitReady of a proxy that stays initializing = %v, %q; want false with a reason", ok, why)
	}
	if st := h.statusJSON(); st["state"] != "starting" || st["ready"] != false {
		t.Errorf("state %v, ready %v; want starting", st["state"], st["ready"])
	}
}

// A drain's end is its word on the wire (status.go answers string(End)).
func TestDrainEndsAreTheWireWords(t *testing.T) {
	for end, word := range map[drain.End]string{
		drain.Drained:        control.Drained,
		drain.TimedOut:       control.DrainTimedOut,
		drain.PeersCompleted: control.PeersCompleted,
		drain.Stopped:        control.Stopped,
	} {
		if string(end) != word {
			t.Errorf("drain end %q is %q on the wire", end, word)
		}
	}
}
