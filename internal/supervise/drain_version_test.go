package supervise

import (
	"syscall"
	"testing"
	"time"
)

// The drain's call is chosen for the release Envoy reports, and said once.
// Not parallel: each supervisor reaps every child of the test process.
func TestDrainCallFollowsEnvoysVersion(t *testing.T) {
	for _, tt := range []struct {
		version, call, level string
	}{
		{"1.36", "/drain_listeners?graceful&inboundonly&skip_exit", "INFO"},
		{"1.31", "none", "WARN"},
	} {
		t.Run(tt.version, func(t *testing.T) {
			h := setup(t, func(_ *harness, c *Config) { c.DrainInboundOnly = true }, "--fake-version", tt.version).start()
			h.waitReady()
			h.eventually("the drain call logged", func() bool {
				return h.logged("drain call chosen", "call", tt.call, "level", tt.level, "envoy", tt.version)
			})
			h.signal(syscall.SIGTERM)
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d", code)
			}
			if !h.logged("drain started", "call", tt.call) {
				t.Errorf("the drain did not make the chosen call %s", tt.call)
			}
			if n := h.countLogged("drain call chosen"); n != 1 {
				t.Errorf("the choice was logged %d times, want once", n)
			}
		})
	}
}

// A build that reports no release gets the call for an unknown one, and is
// asked again when the drain starts rather than taken as unknown for good.
func TestDrainCallForAnUnreadableRelease(t *testing.T) {
	h := setup(t, func(_ *harness, c *Config) { c.DrainInboundOnly = true }, "--fake-version", "custom").start()
	h.waitReady()
	const unreadable = "Envoy's release unreadable"
	h.eventually("the unreadable release logged", func() bool { return h.logged(unreadable, "call", "none", "level", "WARN") })
	h.signal(syscall.SIGTERM)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d", code)
	}
	if !h.logged("drain started", "call", "none") {
		t.Error("the drain made a call for an unknown release")
	}
	if n := h.countLogged(unreadable); n != 2 {
		t.Errorf("the release was asked %d times, want twice (at ready, at the drain)", n)
	}
}
