package supervise

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
)

// testWindow is the deletion window of the in-process tests: long enough
// for a preStop or SIGTERM sent right after the app's report, short enough
// not to slow the tests.
const testWindow = 300 * time.Millisecond

// The deletion race: on a pod's deletion the kubelet SIGTERMs the app at
// once, and the app's death (signaled, 143) can be reported before the
// proxy's preStop hook or SIGTERM arrives. Either within the window makes
// it a deletion: drain, exit 0. Without them the window ends with the
// app's 143. (The supervisor stopped the proxy with 143 at once, and the
// preStop then found no container to exec in.)
func TestDeletionRace(t *testing.T) {
	tests := []struct {
		name      string
		then      func(h *harness) // what the kubelet does after the app's report
		code      int
		decidedBy string
	}{
		{"preStop within the window", func(h *harness) {
			ok, why := h.s.Drain(context.Background())
			if !ok || why != control.PeersCompleted {
				h.t.Errorf("preStop = %v, %q; want drained at once, every peer having completed", ok, why)
			}
		}, 0, "preStop"},
		{"SIGTERM within the window", func(h *harness) { h.signal(syscall.SIGTERM) }, 0, "SIGTERM"},
		{"nothing: the app's own death", func(h *harness) {}, 143, "peer app failed with code 143, and no pod deletion followed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSupervisor(t, func(_ *harness, c *Config) { c.DeletionWindow = testWindow })
			h.waitReady()
			reported := time.Now()
			h.complete("app", 143, "signaled")
			h.eventually("the verdict waits", func() bool {
				return h.logged("peer ended by SIGTERM; waiting for a pod deletion's preStop or SIGTERM before deciding the exit code")
			})
			if s := h.status(); s.ExitCode != nil || s.State != "ready" {
				t.Fatalf("within the window: state %q, exit code decided: %v; want ready and undecided", s.State, s.ExitCode != nil)
			}
			tt.then(h)
			code := h.wait(5 * time.Second)
			if code != tt.code {
				t.Fatalf("Run = %d, want %d", code, tt.code)
			}
			if s := h.status(); s.DecidedBy != tt.decidedBy {
				t.Errorf("decided by %q, want %q", s.DecidedBy, tt.decidedBy)
			}
			if tt.code != 0 {
				if took := time.Since(reported); took < testWindow {
					t.Errorf("decided %v after the report, before the %v window ended", took, testWindow)
				}
			}
		})
	}
}

// Only SIGTERM's 143 waits: the app's own failure stops the proxy at once.
func TestOtherFailuresDoNotWait(t *testing.T) {
	h := startSupervisor(t, func(_ *harness, c *Config) { c.DeletionWindow = time.Minute })
	h.waitReady()
	h.complete("app", 137, "signaled")
	if code := h.wait(5 * time.Second); code != 137 {
		t.Fatalf("Run = %d, want 137", code)
	}
}

// A preStop before the proxy was ever ready returns at once and starts no
// drain (Istio #51883): a proxy that cannot start must not hold the pod's
// termination up. (It started a drain from Starting, which ran to its
// bound.)
func TestPreStopBeforeReadyReturnsAtOnce(t *testing.T) {
	h := startSupervisor(t, func(_ *harness, c *Config) { c.DrainMin = time.Minute; c.DrainTimeout = time.Minute },
		"--init-delay", "1m")
	h.eventually("the proxy has started", func() bool { return h.logged("proxy started") })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	ok, why := h.s.Drain(ctx)
	if !ok || why != control.NeverReady || time.Since(start) > time.Second {
		t.Fatalf("preStop before ready = %v, %q after %v; want at once, %q", ok, why, time.Since(start), control.NeverReady)
	}
	if s := h.status(); s.State != "starting" || s.Draining {
		t.Fatalf("after the preStop: state %q, draining %v; want starting and no drain", s.State, s.Draining)
	}
	h.signal(syscall.SIGTERM)
	if code := h.wait(5 * time.Second); code != 143 {
		t.Fatalf("Run = %d after SIGTERM before ready, want 143", code)
	}
}
