package supervise

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock/clocktest"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// --drain-ready-until-hints: /healthz/ready answers 200 through the drain
// delay and 503 draining once the drain call is accepted; without it, 503
// from the drain's start. The termination's clock stands still in the
// delay (the app listens, so that nothing else ends it), then moves to its
// end.
func TestReadyUntilHints(t *testing.T) {
	const delay = 3 * time.Second
	for _, until := range []bool{false, true} {
		t.Run(fmt.Sprintf("flag %v", until), func(t *testing.T) {
			clk := clocktest.New()
			var healthPort uint16
			h := startSupervisor(t, onFakeClock(clk, func(_ *harness, c *Config) {
				healthPort = proctest.FreePort(t)
				c.HealthAddr = fmt.Sprintf("127.0.0.1:%d", healthPort)
				c.DrainDelay, c.DrainTimeout, c.DrainReadyUntilHints = delay, 20*time.Second, until
			}))
			readyURL := fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", healthPort)
			h.waitReady()
			ln := h.listenApp()
			go h.s.Drain(context.Background())
			h.eventually("the drain started", func() bool { return h.status().Draining })
			want := map[bool]int{false: 503, true: 200}[until]
			if code := httpStatus(t, readyURL); code != want {
				t.Fatalf("/healthz/ready in the delay: %d, want %d", code, want)
			}
			if h.logged("listeners drained") {
				t.Fatal("a drain call in the delay")
			}
			// Once the drain has read its start (it logs "drain started"
			// just after): the status says draining a moment before, and a
			// clock moved then would put the start, and the delay's end, a
			// whole delay later (the cold run of dc6733d, 13:34).
			h.eventually("the drain read its start", func() bool { return h.logged("drain started") })
			clk.Advance(delay)
			h.eventually("the drain call accepted", func() bool { return h.logged("listeners drained") })
			h.eventually("readiness withdrawn after the hints", func() bool {
				ok, why := h.s.healthReady()
				return !ok && why == "draining"
			})
			if code := httpStatus(t, readyURL); code != 503 {
				t.Errorf("/healthz/ready after the hints: %d, want 503", code)
			}
			ln.Close()
			h.stopOnTheClock(clk)
		})
	}
}

// A drain that ends before its hints (every peer completed in the delay)
// keeps no readiness past its end, though the phase stays draining until
// SIGTERM.
func TestReadyUntilHintsEndsWithTheDrain(t *testing.T) {
	clk := clocktest.New()
	h := startSupervisor(t, onFakeClock(clk, func(_ *harness, c *Config) {
		c.Policy = peers.Policy{Count: 1, Restart: peers.Always}
		c.DrainDelay, c.DrainTimeout, c.DrainReadyUntilHints = 3*time.Second, 20*time.Second, true
	}))
	h.waitReady()
	h.listenApp()
	res := make(chan string, 1)
	go func() { _, why := h.s.Drain(context.Background()); res <- why }()
	h.eventually("the drain started", func() bool { return h.status().Draining })
	if ok, why := h.s.healthReady(); !ok {
		t.Fatalf("readiness in the delay: not ready (%s)", why)
	}
	h.complete("app", 0, "")
	select {
	case why := <-res:
		if why != "peers-completed" {
			t.Fatalf("the drain ended %q, want peers-completed", why)
		}
	case <-time.After(30 * time.Second): // a bound on a busy machine, not a wait
		t.Fatal("the drain did not end within 30s of every peer's completion")
	}
	if h.logged("listeners drained") {
		t.Fatal("a drain call was made in the delay")
	}
	if p, _ := h.s.life.current(); p != Draining {
		t.Fatalf("phase %v after the drain, want draining", p)
	}
	if ok, why := h.s.healthReady(); ok || why != "draining" {
		t.Errorf("readiness after the drain's end: %v, %q; want not ready, draining", ok, why)
	}
	h.stopOnTheClock(clk)
}

// stopOnTheClock is the pod's SIGTERM, with the fake clock moved from one
// armed timer to the next until Run returns 0.
func (h *harness) stopOnTheClock(clk *clocktest.Fake) {
	h.t.Helper()
	h.signal(syscall.SIGTERM)
	if !clk.AdvanceUntil(h.done, 10*time.Second) {
		h.t.Fatalf("Run did not return after SIGTERM; armed at %v", clk.Armed())
	}
	if h.code != 0 {
		h.t.Fatalf("Run = %d, want 0", h.code)
	}
}
