package drain

import (
	"slices"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
)

func TestChooseCall(t *testing.T) {
	t.Parallel()
	v := func(minor int) envoy.Version { return envoy.Version{Major: 1, Minor: minor} }
	for _, tt := range []struct {
		name    string
		v       envoy.Version
		known   bool
		inbound bool
		call    string
		givesUp []string
	}{
		// envoy#37873: from 1.34 the sidecar's call meets every aim.
		{"sidecar 1.34", v(34), true, true, "/drain_listeners?graceful&inboundonly&skip_exit", nil},
		{"sidecar 1.40", v(40), true, true, "/drain_listeners?graceful&inboundonly&skip_exit", nil},
		{"sidecar 2.0", envoy.Version{Major: 2}, true, true, "/drain_listeners?graceful&inboundonly&skip_exit", nil},
		// envoy#35020: before, any hint reaches the app's outbound
		// connections, so none is given.
		{"sidecar 1.33", v(33), true, true, "none", []string{AimInboundHinted}},
		{"sidecar 1.28", v(28), true, true, "none", []string{AimInboundHinted}},
		{"sidecar unknown", envoy.Version{}, false, true, "none", []string{AimInboundHinted}},
		// Every listener: skip_exit from 1.29 (envoy#30003).
		{"all 1.29", v(29), true, false, "/drain_listeners?graceful&skip_exit", nil},
		{"all unknown", envoy.Version{}, false, false, "/drain_listeners?graceful&skip_exit", nil},
		{"all 1.28", v(28), true, false, "/drain_listeners?graceful", []string{AimInboundAccepting, AimNoStop}},
	} {
		c := ChooseCall(tt.v, tt.known, tt.inbound)
		if c.String() != tt.call || !slices.Equal(c.GivesUp, tt.givesUp) {
			t.Errorf("%s: %s giving up %q; want %s giving up %q", tt.name, c, c.GivesUp, tt.call, tt.givesUp)
		}
	}
}

// A drain whose release gets no call makes none, and still waits for the
// app and ends drained.
func TestDrainWithoutACall(t *testing.T) {
	t.Parallel()
	a, s := &fakeAdmin{}, &fakeScanner{}
	cfg := config(a, s, nil)
	cfg.Min, cfg.Call = 0, ChooseCall(envoy.Version{}, false, true)
	r := within(t, start(cfg, nil), 5*time.Second)
	if r.End != Drained {
		t.Fatalf("end %q", r.End)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.posts) != 0 {
		t.Errorf("posts %v; want none", a.posts)
	}
}
