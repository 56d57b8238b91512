package supervise

import (
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock/clocktest"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// Issue 38: a verdict that stops the proxy fixes the code at once, but the
// stop waits for a peer still running under exec, as a drain does for
// settled peers (drain.PeersEnded): the verdict starts the drain, whose end
// once no peer runs stops the proxy. (Under Never, job's failure stopped
// the proxy 40 ms later under uploader's requests.) The running peer here
// is then killed with its exec: its released lock reads as lost, 137, dated
// from its run's start, before the decisive end. The code stays the one
// the decisive end fixed.
func TestVerdictWaitsForARunningPeer(t *testing.T) {
	for _, tt := range []struct {
		name      string
		policy    peers.Policy
		code      int
		decidedBy string
	}{
		{"another peer's failure under Never", peers.Policy{Names: []string{"job", "app"}}, 3, "peer job failed with code 3"},
		{"a success under --peers 1", peers.Policy{Count: 1}, 0, "every peer succeeded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t, func(_ *harness, c *Config) {
				c.Policy, c.DeletionWindow = tt.policy, testWindow
				c.DrainMin, c.DrainTimeout = time.Minute, time.Minute
			})
			holder := holdPeer(h) // "app", running under exec
			h.start()
			h.waitReady()
			h.eventually("the book sees the peer running", func() bool { n, _ := h.s.book.Running(); return n == 1 })
			h.complete("job", tt.code, "")
			// The code is fixed first, then acted on: the state leaves ready
			// a moment later, once the termination has counted the peers.
			h.eventually("the verdict acted on", func() bool { return h.status().State != "ready" })
			s := h.status()
			if s.ExitCode == nil || *s.ExitCode != tt.code || s.DecidedBy != tt.decidedBy {
				t.Fatalf("after job's end: exit code %v, decided by %q; want %d by %q, fixed at once", s.ExitCode, s.DecidedBy, tt.code, tt.decidedBy)
			}
			if s.State != "draining" {
				t.Fatalf("state %q while a peer runs under exec, want draining", s.State)
			}
			h.running(notEnded)
			if !h.logged("the exit code is fixed, but a peer may still run under exec", "peers_running", "1") {
				t.Error("the wait for the running peer was not logged")
			}
			holder.Process.Kill()
			if got := h.wait(5 * time.Second); got != tt.code {
				t.Fatalf("Run = %d, want %d: the running peer's later end must not change the code", got, tt.code)
			}
			if !h.logged("drain ended", "end", "peers-completed") {
				t.Error("the drain did not end with the running peer")
			}
			if h.logged("drain ended", "end", "timeout") {
				t.Error("the drain waited for its bound")
			}
		})
	}
}

// A verdict with no peer running still stops the proxy at once, with no
// drain: the common Job's end is unchanged.
func TestVerdictWithoutARunningPeerStopsAtOnce(t *testing.T) {
	h := startSupervisor(t, func(_ *harness, c *Config) { c.DrainMin, c.DrainTimeout = time.Minute, time.Minute })
	h.waitReady()
	h.complete("app", 0, "")
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	if h.logged("drain started") || h.logged("the exit code is fixed, but a peer may still run") {
		t.Error("a verdict with no peer running drained")
	}
}

// The wait for a running peer is bounded as a drain is: the verdict's
// drain ends at --drain-timeout, to the instant, and the proxy stops then
// with the verdict's code.
func TestVerdictWaitBoundOnTheClock(t *testing.T) {
	const bound = 9 * time.Second
	clk := clocktest.New()
	h := setup(t, onFakeClock(clk, func(_ *harness, c *Config) {
		c.Policy = peers.Policy{Names: []string{"job", "app"}}
		c.DrainMin, c.DrainTimeout = bound, bound
		c.Intervals.DrainTick = time.Hour
	}))
	holdPeer(h)
	h.start()
	h.waitReady()
	h.eventually("the book sees the peer running", func() bool { n, _ := h.s.book.Running(); return n == 1 })
	began := clk.Now()
	h.complete("job", 3, "")
	expectArmed(t, clk, "the drain's bound", began, bound)
	if code := h.wait(5 * time.Second); code != 3 {
		t.Fatalf("Run = %d, want job's 3", code)
	}
	if !h.logged("drain ended", "end", "timeout") {
		t.Error("the drain did not end by its bound")
	}
}

// A SIGTERM during the verdict's drain joins it: the code stays the
// verdict's, and the proxy stops once the running peer has ended.
func TestSigtermJoinsTheVerdictsDrain(t *testing.T) {
	h := setup(t, func(_ *harness, c *Config) {
		c.Policy = peers.Policy{Names: []string{"job", "app"}}
		c.DrainMin, c.DrainTimeout = time.Minute, time.Minute
	})
	holder := holdPeer(h)
	h.start()
	h.waitReady()
	h.eventually("the book sees the peer running", func() bool { n, _ := h.s.book.Running(); return n == 1 })
	h.complete("job", 3, "")
	// The verdict first: the actor reads the book on its own turn, and a
	// SIGTERM pending beside it could be taken first.
	h.eventually("the verdict's drain started", func() bool { return h.status().State == "draining" })
	h.signal(syscall.SIGTERM)
	h.running(notEnded)
	holder.Process.Kill()
	if code := h.wait(5 * time.Second); code != 3 {
		t.Fatalf("Run = %d, want job's 3", code)
	}
	if !h.logged("drain already started", "trigger", "SIGTERM") {
		t.Error("the SIGTERM did not join the verdict's drain")
	}
}
