package supervise

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock/clocktest"
	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The termination's bounds on a fake clock: each test waits until the
// supervisor has armed the timer of the bound it checks, at the instant the
// bound says, and only then moves the time there. A bound that changed
// arms its timer elsewhere, and the test fails at once, with no wall-clock
// tolerance either way. The fake Envoy and the tracker still run on real
// time; only the termination's clock stands still.

// armedWithin bounds the real time a test waits for a timer to be armed.
const armedWithin = 5 * time.Second

// onFakeClock is a supervisor on a fake clock.
func onFakeClock(clk *clocktest.Fake, mod func(h *harness, c *Config)) func(h *harness, c *Config) {
	return func(h *harness, c *Config) {
		c.Clock = clk
		if mod != nil {
			mod(h, c)
		}
	}
}

// expectArmed fails the test unless the supervisor arms a timer for what,
// at from+d, and then moves the fake clock there.
func expectArmed(t *testing.T, clk *clocktest.Fake, what string, from time.Time, d time.Duration) {
	t.Helper()
	if !clk.WaitArmed(from.Add(d), armedWithin) {
		t.Fatalf("no timer armed for %s at %v; armed at %v", what, d, since(from, clk.Armed()))
	}
	clk.Advance(from.Add(d).Sub(clk.Now()))
}

func since(from time.Time, at []time.Time) []time.Duration {
	var ds []time.Duration
	for _, a := range at {
		ds = append(ds, a.Sub(from))
	}
	return ds
}

// holdPeer starts a peer that marks its record running and holds its lock
// until it is killed, as exec does while the app runs.
func holdPeer(h *harness) *exec.Cmd {
	h.t.Helper()
	if err := peers.Open(h.dir).Create(); err != nil {
		h.t.Fatal(err)
	}
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), helperEnv+"=hold "+h.dir+" app")
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := holder.Start(); err != nil {
		h.t.Fatal(err)
	}
	// No Wait: the supervisor's reaper collects it.
	h.t.Cleanup(func() { holder.Process.Kill() })
	h.eventually("the helper holds the record", func() bool {
		_, err := os.Stat(filepath.Join(h.dir, "app.held"))
		return err == nil
	})
	return holder
}

// A SIGTERM's drain that a running peer holds ends at the drain's bound,
// to the instant, and the proxy stops then. The drain's checks are paced
// far apart, so that its only timer is the bound.
func TestDrainBoundOnTheClock(t *testing.T) {
	const bound = 7 * time.Second
	clk := clocktest.New()
	h := setup(t, onFakeClock(clk, func(_ *harness, c *Config) {
		c.DrainTimeout = bound
		c.Intervals.DrainTick = time.Hour
	}))
	holdPeer(h)
	h.start()
	h.waitReady()
	began := clk.Now()
	h.signal(syscall.SIGTERM)
	expectArmed(t, clk, "the drain's bound", began, bound)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	if !h.logged("drain ended", "end", "timeout") {
		t.Error("the drain did not end by its bound")
	}
}

// A failed peer that may be the first sign of the pod's deletion waits for
// it: the deletion window without exec's evidence, the grace period and
// the window with it; then the peer's code decides, at that instant and
// not before.
func TestDeletionWaitOnTheClock(t *testing.T) {
	const window, grace = 3 * time.Second, 11 * time.Second
	for _, tt := range []struct {
		name     string
		evidence bool
		wait     time.Duration
	}{
		{"killed by SIGTERM", false, window},
		{"stopped from outside", true, grace + window},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New()
			h := startSupervisor(t, onFakeClock(clk, func(_ *harness, c *Config) {
				c.DeletionWindow, c.GracePeriod = window, grace
			}))
			h.waitReady()
			began := clk.Now()
			c := control.Completion{Peer: "app", Code: 143, Reason: "signaled"}
			if tt.evidence {
				c.StopSignal, c.StoppedAt = "SIGTERM", began
			}
			if err := h.s.Complete(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			if !clk.WaitArmed(began.Add(tt.wait), armedWithin) {
				t.Fatalf("no timer armed for the deletion wait at %v; armed at %v", tt.wait, since(began, clk.Armed()))
			}
			if s := h.status(); s.ExitCode != nil {
				t.Fatalf("decided %d before the wait passed", *s.ExitCode)
			}
			clk.Advance(tt.wait)
			if code := h.wait(5 * time.Second); code != 143 {
				t.Fatalf("Run = %d, want the peer's 143", code)
			}
		})
	}
}

// The stop sequence's bounds, --quit-grace and --stop-timeout, are held on
// the clock by TestStopEscalation.

// A native sidecar's SIGTERM: once the app has gone, the proxy stops with
// the clock standing still. A SIGTERM while the app still runs is not the
// pod's end, which the kubelet signals only once the app has exited: it
// restarts the sidecar. The drain then holds the proxy for --drain-min to
// the instant, as the pod leaves the endpoints, and does not wait for the
// app's end.
func TestNativeRulesOnTheClock(t *testing.T) {
	const min = 6 * time.Second
	for _, appRuns := range []bool{false, true} {
		name := "the app has gone"
		if appRuns {
			name = "the app runs"
		}
		t.Run(name, func(t *testing.T) {
			clk := clocktest.New()
			h := startSupervisor(t, onFakeClock(clk, native(min)))
			h.waitReady()
			if appRuns {
				h.listenApp()
			}
			began := clk.Now()
			h.signal(syscall.SIGTERM)
			if appRuns {
				// The signal is acted on when h.signal returns.
				if s := h.status(); s.State != "draining" {
					t.Errorf("state %q during the hold, want draining", s.State)
				}
				expectArmed(t, clk, "--drain-min's hold", began, min)
			}
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d, want 0", code)
			}
			if want := map[bool]string{false: "the app has exited", true: "the sidecar restarts"}[appRuns]; !h.logged("stop requested", "reason", want) {
				t.Errorf("the stop does not say %q", want)
			}
		})
	}
}

// A native sidecar's restart hold is --drain-min capped by the drain's
// bound (docs/design.md): a floor above the bound would hold the proxy
// past the drain that the kubelet's grace period was fitted to. The hold
// ends at the bound, to the instant, and stops the proxy.
func TestNativeHoldIsCappedByTheDrainBound(t *testing.T) {
	const floor, bound = 30 * time.Second, 4 * time.Second
	clk := clocktest.New()
	h := startSupervisor(t, onFakeClock(clk, func(h *harness, c *Config) {
		native(floor)(h, c)
		c.DrainTimeout = bound
	}))
	h.waitReady()
	h.listenApp()
	began := clk.Now()
	h.signal(syscall.SIGTERM)
	expectArmed(t, clk, "the hold, cut to the drain's bound", began, bound)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	if !h.logged("stop requested", "reason", "SIGTERM: the sidecar restarts while the app runs") {
		t.Error("the proxy did not stop by the hold")
	}
	if slices.Contains(clk.Armed(), began.Add(floor)) {
		t.Error("a timer is armed for --drain-min past the drain's bound")
	}
}

// A SIGTERM after a preStop's drain ended re-checks the drain's condition
// within what is left of that drain's bound, not a bound of its own
// (docs/design.md, "Bounds": the sum of the drain and the stop still fits
// the grace period). A connection opened since holds the re-check until
// the first drain's start plus --drain-timeout, to the instant, and the
// proxy stops then. The re-check's checks are paced far apart, so that its
// only timer is the bound.
func TestSigtermRecheckGetsWhatIsLeftOfTheBound(t *testing.T) {
	const bound, later = 20 * time.Second, 15 * time.Second
	envoyPort := proctest.FreePort(t)
	clk := clocktest.New()
	h := startSupervisor(t, onFakeClock(clk, func(_ *harness, c *Config) {
		c.DrainTimeout = bound
		c.Intervals.DrainTick = time.Hour
	}), "--listener", fmt.Sprintf("in=127.0.0.1:%d,inbound,tcp", envoyPort))
	h.waitReady()
	began := clk.Now()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		if ok, why := h.s.Drain(context.Background()); !ok {
			t.Errorf("preStop drain: %s", why)
		}
	}()
	// Nothing holds it: it ends after its quiet period. (Not timer by
	// timer: the admin calls' bounds are on the clock too, and would cut
	// them.)
	expectArmed(t, clk, "the preStop drain's quiet period", began, h.cfg.Intervals.DrainQuiet)
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatalf("the preStop's drain did not end after its quiet period; armed at %v", since(began, clk.Armed()))
	}
	clk.Advance(began.Add(later).Sub(clk.Now()))
	defer busyConnection(t, envoyPort).Close()
	h.signal(syscall.SIGTERM)
	expectArmed(t, clk, "what is left of the drain's bound", began, bound)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	if slices.Contains(clk.Armed(), began.Add(later+bound)) {
		t.Error("a timer is armed for a whole bound from the SIGTERM")
	}
}

// A SIGTERM within the deletion wait is the pod's deletion: it decides 0
// and ends the wait at once (its timer is disarmed), and the proxy stops
// once the drain it started has ended.
func TestDeletionDecidedOnTheClock(t *testing.T) {
	const window = 3 * time.Second
	clk := clocktest.New()
	h := startSupervisor(t, onFakeClock(clk, func(_ *harness, c *Config) { c.DeletionWindow = window }))
	h.waitReady()
	began := clk.Now()
	h.complete("app", 143, "signaled")
	if !clk.WaitArmed(began.Add(window), armedWithin) {
		t.Fatalf("no timer armed for the deletion window; armed at %v", since(began, clk.Armed()))
	}
	h.signal(syscall.SIGTERM)
	if s := h.status(); s.ExitCode == nil || *s.ExitCode != 0 || s.DecidedBy != "SIGTERM" {
		t.Fatalf("after SIGTERM: %+v; want 0, decided by SIGTERM", s)
	}
	// The actor stops the window's timer just after the signal's record,
	// which the status above reads.
	h.eventually("the deletion window's timer disarmed after the SIGTERM decided", func() bool {
		return !slices.Contains(clk.Armed(), began.Add(window))
	})
	// The drain (no app, no connection) ends after its quiet period, check
	// by check.
	if !clk.AdvanceUntil(h.done, 10*time.Second) {
		t.Fatalf("Run did not return; armed at %v", since(began, clk.Armed()))
	}
	if h.code != 0 {
		t.Fatalf("Run = %d, want 0", h.code)
	}
}
