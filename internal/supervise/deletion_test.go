package supervise

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock/clocktest"
	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// testWindow is the deletion window of the in-process tests: long enough
// for a preStop or SIGTERM sent right after the app's report where the
// wall clock runs it, short enough not to slow the tests.
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
		// The hook decides; the drain it starts, or the one the verdict
		// started for it a moment before, ends at once, every peer having
		// completed, and may have stopped the proxy by the time the hook
		// asks to join it.
		{"preStop within the window", func(h *harness) {
			ok, why := h.s.Drain(context.Background())
			if !ok || (why != control.PeersCompleted && why != control.AlreadyStopping) {
				h.t.Errorf("preStop = %v, %q; want drained at once, every peer having completed", ok, why)
			}
		}, 0, "preStop"},
		{"SIGTERM within the window", func(h *harness) { h.signal(syscall.SIGTERM) }, 0, "SIGTERM"},
		{"nothing: the app's own death", func(h *harness) {}, 143, "peer app failed with code 143, and no pod deletion followed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// On a fake clock: the window ends when the test says, so the
			// kubelet's act "within the window" is within it however
			// slowly this machine runs the test.
			clk := clocktest.New()
			h := startSupervisor(t, onFakeClock(clk, func(_ *harness, c *Config) { c.DeletionWindow = testWindow }))
			h.waitReady()
			reported := clk.Now()
			h.complete("app", 143, "signaled")
			h.eventually("the verdict waits", func() bool {
				return h.logged("peer ended by SIGTERM; waiting for a pod deletion's preStop or SIGTERM before deciding the exit code")
			})
			if !clk.WaitArmed(reported.Add(testWindow), armedWithin) {
				t.Fatalf("no timer armed for the deletion window at %v; armed at %v", testWindow, since(reported, clk.Armed()))
			}
			if s := h.status(); s.ExitCode != nil || s.State != "ready" {
				t.Fatalf("within the window: state %q, exit code decided: %v; want ready and undecided", s.State, s.ExitCode != nil)
			}
			tt.then(h)
			if tt.code != 0 {
				clk.Advance(testWindow) // the window ends: the peer's code decides, not before
			}
			code := h.wait(5 * time.Second)
			if code != tt.code {
				t.Fatalf("Run = %d, want %d", code, tt.code)
			}
			if s := h.status(); s.DecidedBy != tt.decidedBy {
				t.Errorf("decided by %q, want %q", s.DecidedBy, tt.decidedBy)
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

// A peer that exec saw stopped from outside waits for the pod's
// termination within the grace period and the window, counted from its
// stop; one without that evidence waits the window alone, and other
// failures and successes wait nothing.
func TestDeletionWait(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	const window, grace = 2 * time.Second, 30 * time.Second
	stop := func(ago time.Duration) peers.Stop { return peers.Stop{Signal: "SIGTERM", At: now.Add(-ago)} }
	tests := []struct {
		name    string
		restart peers.Restart
		v       peers.Verdict
		want    time.Duration
	}{
		{"success", peers.Never, peers.Verdict{Done: true}, 0},
		{"a failure of its own", peers.Never, peers.Verdict{Failed: "app", Code: 1, Reason: peers.Exited}, 0},
		{"killed, not by SIGTERM", peers.Never, peers.Verdict{Failed: "app", Code: 137, Reason: peers.Signaled}, 0},
		{"SIGTERM, no evidence", peers.Never, peers.Verdict{Failed: "app", Code: 143, Reason: peers.Signaled}, window},
		{"stopped just now", peers.Never, peers.Verdict{Failed: "app", Code: 143, Reason: peers.Signaled, Stop: stop(0)}, grace + window},
		{"stopped, then exited 1", peers.Never, peers.Verdict{Failed: "app", Code: 1, Reason: peers.Exited, Stop: stop(0)}, grace + window},
		{"stopped 10 s ago", peers.Never, peers.Verdict{Failed: "app", Code: 143, Reason: peers.Signaled, Stop: stop(10 * time.Second)}, grace + window - 10*time.Second},
		{"stopped longer ago than the grace period", peers.Never, peers.Verdict{Failed: "app", Code: 143, Reason: peers.Signaled, Stop: stop(time.Hour)}, window},
		{"stopped in the future", peers.Never, peers.Verdict{Failed: "app", Code: 143, Reason: peers.Signaled, Stop: stop(-time.Hour)}, grace + window},
		// A final failure under OnFailure: the peer's own rules made it so.
		{"a peer's own Never, under OnFailure", peers.OnFailure, peers.Verdict{Failed: "app", Code: 143, Reason: peers.Signaled, Stop: stop(0)}, grace + window},
	}
	for _, tt := range tests {
		term := &termination{Supervisor: &Supervisor{cfg: Config{DeletionWindow: window, GracePeriod: grace, Policy: peers.Policy{Restart: tt.restart}}}}
		if got := term.deletionWait(tt.v, now); got != tt.want {
			t.Errorf("%s: deletionWait = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The kubelet stopped the app (exec forwarded its SIGTERM and said so), and
// the proxy's preStop comes after the deletion window: still a deletion,
// exit 0. (The window alone decided 143 before the hook.)
func TestStoppedPeerWaitsPastTheWindow(t *testing.T) {
	const grace = time.Minute
	clk := clocktest.New()
	h := startSupervisor(t, onFakeClock(clk, func(_ *harness, c *Config) { c.DeletionWindow, c.GracePeriod = testWindow, grace }))
	h.waitReady()
	stopped := clk.Now()
	err := h.s.Complete(context.Background(), control.Completion{Peer: "app", Code: 143, Reason: "signaled", StopSignal: "SIGTERM", StoppedAt: stopped})
	if err != nil {
		t.Fatal(err)
	}
	h.eventually("the verdict waits", func() bool { return h.logged("peer stopped from outside; waiting for the pod's termination") })
	// The wait runs to the grace period and the window, from the stop; the
	// clock then passes the window alone, and nothing may be decided.
	if !clk.WaitArmed(stopped.Add(grace+testWindow), armedWithin) {
		t.Fatalf("no timer armed for the termination's wait at %v; armed at %v", grace+testWindow, since(stopped, clk.Armed()))
	}
	clk.Advance(2 * testWindow)
	if s := h.status(); s.ExitCode != nil || s.State != "ready" {
		t.Fatalf("past the window: state %q, exit code decided: %v; want ready and undecided", s.State, s.ExitCode != nil)
	}
	if ok, why := h.s.Drain(context.Background()); !ok || why != control.PeersCompleted {
		t.Errorf("preStop = %v, %q; want drained at once, every peer having completed", ok, why)
	}
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	if s := h.status(); s.DecidedBy != "preStop" {
		t.Errorf("decided by %q, want preStop", s.DecidedBy)
	}
}
