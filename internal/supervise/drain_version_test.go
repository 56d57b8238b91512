package supervise

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// The drain's call is chosen for the release Envoy reports, and said once.
// Not parallel: each supervisor reaps every child of the test process.
func TestDrainCallFollowsEnvoysVersion(t *testing.T) {
	for _, tt := range []struct {
		version, call, level, made string
	}{
		{"1.36", "/drain_listeners?graceful&inboundonly&skip_exit", "INFO", "listeners drained"},
		{"1.31", "none", "WARN", "listeners left undrained"},
		// main's 1.34.0-dev may predate envoy#38430: no call.
		{"1.34.0-dev", "none", "WARN", "listeners left undrained"},
	} {
		t.Run(tt.version, func(t *testing.T) {
			h := setup(t, func(_ *harness, c *Config) { c.DrainInboundOnly = true }, "--fake-version", tt.version).start()
			h.waitReady()
			h.eventually("the drain call logged", func() bool {
				return h.logged("drain call chosen", "call", tt.call, "level", tt.level, "envoy", strings.TrimSuffix(tt.version, "-dev"))
			})
			h.signal(syscall.SIGTERM)
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d", code)
			}
			if !h.logged(tt.made) {
				t.Errorf("the drain did not make the chosen call %s (no %q)", tt.call, tt.made)
			}
			if n := h.countLogged("drain call chosen"); n != 1 {
				t.Errorf("the choice was logged %d times, want once", n)
			}
		})
	}
}

// A build that reports no release gets the call for an unknown one (none,
// for a sidecar), said once at ready; the drain asks again rather than
// taking it as unknown for good, and says so once.
func TestDrainCallForAnUnreadableRelease(t *testing.T) {
	h := setup(t, func(_ *harness, c *Config) { c.DrainInboundOnly = true }, "--fake-version", "custom").start()
	h.waitReady()
	const unreadable = "Envoy's release unreadable"
	h.eventually("the unreadable release logged", func() bool { return h.logged(unreadable, "call", "none", "level", "WARN") })
	h.signal(syscall.SIGTERM)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d", code)
	}
	if h.logged("listeners drained") {
		t.Error("the drain made a call for an unknown release")
	}
	if n := h.countLogged(unreadable); n != 1 {
		t.Errorf("the unreadable release was said %d times, want once", n)
	}
	if n := h.countLogged("no drain call while Envoy's release is unknown"); n != 1 {
		t.Errorf("the drain's wait for the release was said %d times, want once", n)
	}
}

// Envoy's own drain time is read with its release, and one shorter than the
// drain's bound is said once, with what it costs on that release: on the
// next release (Next, main after 1.40) long streams are cut from 2/3 of it.
func TestDrainTimeWarning(t *testing.T) {
	const short = "Envoy's --drain-time-s is short for the drain's bound"
	for _, tt := range []struct {
		version, drainTime, effect string // effect "": no warning
	}{
		{"1.40", "20", ""},
		{"1.40", "5", "next release"},
		{"next", "29", "2/3 of --drain-time-s"},
		{"next", "30", ""},
	} {
		t.Run(tt.version+"/"+tt.drainTime, func(t *testing.T) {
			h := setup(t, func(_ *harness, c *Config) { c.DrainInboundOnly, c.DrainTimeout = true, 20*time.Second },
				"--fake-version", tt.version, "--drain-time-s", tt.drainTime).start()
			h.waitReady()
			h.eventually("the drain call logged", func() bool { return h.logged("drain call chosen") })
			h.signal(syscall.SIGTERM)
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d", code)
			}
			if n := h.countLogged(short); n != min(len(tt.effect), 1) {
				t.Fatalf("the drain time warned %d times, want %d", n, min(len(tt.effect), 1))
			}
			if tt.effect != "" && !h.logged(short, "level", "WARN", "effect", tt.effect) {
				t.Errorf("the warning does not say %q", tt.effect)
			}
		})
	}
}
