package drain

import (
	"context"
	"slices"
	"strings"
	"sync"
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
		// envoy#38430: from 1.34.0 the sidecar's call meets every aim.
		{"sidecar 1.34", v(34), true, true, "/drain_listeners?graceful&inboundonly&skip_exit", nil},
		{"sidecar 1.40", v(40), true, true, "/drain_listeners?graceful&inboundonly&skip_exit", nil},
		{"sidecar 2.0", envoy.Version{Major: 2}, true, true, "/drain_listeners?graceful&inboundonly&skip_exit", nil},
		// Istio's proxies between patches, and main after 1.34.0.
		{"sidecar 1.34.2-dev", envoy.Version{Major: 1, Minor: 34, Patch: 2}, true, true, "/drain_listeners?graceful&inboundonly&skip_exit", nil},
		{"sidecar 1.35.0-dev", envoy.Version{Major: 1, Minor: 35, Dev: true}, true, true, "/drain_listeners?graceful&inboundonly&skip_exit", nil},
		// envoy#35020: before, any hint reaches the app's outbound
		// connections, so none is given; main's 1.34.0-dev may predate
		// envoy#38430.
		{"sidecar 1.34.0-dev", envoy.Version{Major: 1, Minor: 34, Dev: true}, true, true, "none", []string{AimInboundHinted}},
		{"sidecar 1.33", v(33), true, true, "none", []string{AimInboundHinted}},
		{"sidecar 1.27", v(27), true, true, "none", []string{AimInboundHinted}},
		{"sidecar unknown", envoy.Version{}, false, true, "none", []string{AimInboundHinted}},
		// Every listener: skip_exit from 1.28.0 (envoy#30003).
		{"all 1.28", v(28), true, false, "/drain_listeners?graceful&skip_exit", nil},
		{"all unknown", envoy.Version{}, false, false, "/drain_listeners?graceful&skip_exit", nil},
		{"all 1.28.0-dev", envoy.Version{Major: 1, Minor: 28, Dev: true}, true, false, "/drain_listeners?graceful", []string{AimInboundAccepting, AimNoStop}},
		{"all 1.27", v(27), true, false, "/drain_listeners?graceful", []string{AimInboundAccepting, AimNoStop}},
	} {
		c := ChooseCall(tt.v, tt.known, tt.inbound)
		if c.String() != tt.call || !slices.Equal(c.GivesUp, tt.givesUp) {
			t.Errorf("%s: %s giving up %q; want %s giving up %q", tt.name, c, c.GivesUp, tt.call, tt.givesUp)
		}
	}
}

// A drain whose release gets no call makes none, and still waits for the
// app and ends drained: a release known to take none, and one never read.
func TestDrainWithoutACall(t *testing.T) {
	t.Parallel()
	for _, known := range []bool{true, false} {
		a, s := &fakeAdmin{}, &fakeScanner{}
		cfg := config(a, s, nil)
		cfg.Min, cfg.Call = 0, callFor(ChooseCall(envoy.Version{Major: 1, Minor: 31}, known, true), known)
		r := within(t, start(cfg, nil), 5*time.Second)
		if r.End != Drained {
			t.Fatalf("known %v: end %q", known, r.End)
		}
		a.mu.Lock()
		if len(a.posts) != 0 {
			t.Errorf("known %v: posts %v; want none", known, a.posts)
		}
		a.mu.Unlock()
	}
}

// A release that could not be read when the drain started is asked again
// at each retry, and once read gets its call: one slow /server_info must
// not leave inbound connections unhinted for the whole drain.
func TestDrainAsksTheReleaseAgain(t *testing.T) {
	t.Parallel()
	a, s := &fakeAdmin{}, &fakeScanner{ports: []uint16{8080}}
	clock := newClock()
	cfg := config(a, s, clock)
	var mu sync.Mutex
	asked := 0
	cfg.Call = func(context.Context) (Call, bool) {
		mu.Lock()
		defer mu.Unlock()
		if asked++; asked < 3 {
			return ChooseCall(envoy.Version{}, false, true), false
		}
		return ChooseCall(envoy.Version{Major: 1, Minor: 36}, true, true), true
	}
	done := start(cfg, nil)
	posted := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.posts)
	}
	for i := 0; i < 5 && posted() == 0; i++ {
		clock.advance(t, DefaultProgress)
	}
	if n := posted(); n != 1 {
		t.Fatalf("%d posts after 5 retries with the release read at the third; want 1", n)
	}
	mu.Lock()
	if asked != 3 {
		t.Errorf("the release was asked %d times; want 3 (then no more once the call is made)", asked)
	}
	mu.Unlock()
	s.close()
	clock.advance(t, cfg.Min+DefaultQuiet)
	if r := within(t, done, 5*time.Second); r.End != Drained {
		t.Errorf("end %q, want drained", r.End)
	}
}

// What Envoy's own --drain-time-s costs a drain bounded at 20s, by release.
func TestDrainTimeRisk(t *testing.T) {
	t.Parallel()
	const bound = 20 * time.Second
	sidecar := func(v envoy.Version) Call { return ChooseCall(v, true, true) }
	next := envoy.Version{Major: 1, Minor: 41, Dev: true}
	v := func(minor int) envoy.Version { return envoy.Version{Major: 1, Minor: minor} }
	for _, tt := range []struct {
		name string
		v    envoy.Version
		call Call
		d    time.Duration
		want string // a word of the effect; "" for none
	}{
		{"1.40, long enough", v(40), sidecar(v(40)), 20 * time.Second, ""},
		{"1.40, short", v(40), sidecar(v(40)), 5 * time.Second, "next release"},
		{"1.40, not reported", v(40), sidecar(v(40)), 0, ""},
		{"edge 1.27, short", v(27), ChooseCall(v(27), true, false), 5 * time.Second, "stops its listeners"},
		// Next: long streams are cut from 2/3 of the drain time.
		{"next, 30s", next, sidecar(next), 30 * time.Second, ""},
		{"next, 29s", next, sidecar(next), 29 * time.Second, "WebSocket"},
		{"1.41, 20s", v(41), sidecar(v(41)), 20 * time.Second, "WebSocket"},
	} {
		got := DrainTimeRisk(tt.v, tt.call, tt.d, bound)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q; want one saying %q", tt.name, got, tt.want)
		}
	}
}
