package drain

import (
	"slices"
	"testing"
	"time"
)

// postsOf is what the drain has POSTed so far.
func (a *fakeAdmin) postsOf() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.posts)
}

// The delay holds every close hint back, to the millisecond, while the app
// listens: no /drain_listeners and no /healthcheck/fail before it has
// passed, both at once when it has. The delay is off the ticks' grid, so
// that a drain that only ticks misses it.
func TestDelayHoldsTheHints(t *testing.T) {
	a, s, clock := &fakeAdmin{}, &fakeScanner{ports: []uint16{8080}}, newClock()
	cfg := config(a, s, clock)
	cfg.Delay = 3*time.Second + 10*time.Millisecond
	cfg.HealthcheckFail = true
	start(cfg, nil)
	clock.advance(t, cfg.Delay-time.Millisecond)
	if p := a.postsOf(); len(p) != 0 {
		t.Fatalf("posted %v before the delay passed", p)
	}
	clock.advance(t, time.Millisecond)
	if p := a.postsOf(); !slices.Equal(p, []string{"/healthcheck/fail", "/drain_listeners"}) {
		t.Fatalf("posted %v when the delay passed; want /healthcheck/fail, /drain_listeners", p)
	}
}

// An app that closes its port during the delay ends it: its clients have
// nowhere here to come back to. The hints go at the check that sees the
// close.
func TestDelayEndsWhenTheAppStopsListening(t *testing.T) {
	a, s, clock := &fakeAdmin{conns: 1}, &fakeScanner{ports: []uint16{8080}}, newClock()
	cfg := config(a, s, clock)
	cfg.Delay = 10 * time.Second
	start(cfg, nil)
	clock.advance(t, time.Second)
	if p := a.postsOf(); len(p) != 0 {
		t.Fatalf("posted %v while the app listens, in the delay", p)
	}
	s.close()
	clock.advance(t, DefaultTick)
	if p := a.postsOf(); !slices.Equal(p, []string{"/drain_listeners"}) {
		t.Fatalf("posted %v a tick after the app's close; want /drain_listeners", p)
	}
}

// Settled peers end the drain in the delay at once, without a hint:
// nothing is left to protect.
func TestDelayEndsWithThePeers(t *testing.T) {
	a, s, clock := &fakeAdmin{}, &fakeScanner{ports: []uint16{8080}}, newClock()
	cfg := config(a, s, clock)
	cfg.Delay = 10 * time.Second
	settled := make(chan struct{})
	res := start(cfg, settled)
	clock.advance(t, time.Second)
	close(settled)
	r := within(t, res, 5*time.Second)
	if r.End != PeersCompleted {
		t.Fatalf("end %q", r.End)
	}
	took(t, r, time.Second, time.Second)
	if p := a.postsOf(); len(p) != 0 {
		t.Fatalf("posted %v", p)
	}
}

// The delay does not hold the drain's end: an app gone and Envoy idle end
// it after Min and the quiet period, as without a delay.
func TestDelayDoesNotHoldTheEnd(t *testing.T) {
	a, s, clock := &fakeAdmin{}, &fakeScanner{}, newClock()
	cfg := config(a, s, clock)
	cfg.Delay, cfg.Min = 10*time.Second, 0
	if r := endsAt(t, clock, start(cfg, nil), DefaultQuiet); r.End != Drained {
		t.Fatalf("end %q", r.End)
	}
}
