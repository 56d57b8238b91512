package drain

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
)

// Hinted is said once, when Envoy accepts the drain call: not in the delay,
// not while Envoy refuses the call, and not again at later checks.
func TestHintedOnceTheCallIsAccepted(t *testing.T) {
	a, s, clock := &fakeAdmin{failPosts: 2, conns: 1}, &fakeScanner{ports: []uint16{8080}}, newClock()
	cfg := config(a, s, clock)
	cfg.Delay = time.Second
	var hinted atomic.Int32
	cfg.Hinted = func() { hinted.Add(1) }
	start(cfg, nil)
	clock.advance(t, cfg.Delay-time.Millisecond)
	if n, posts := hinted.Load(), a.postsOf(); n != 0 || len(posts) != 0 {
		t.Fatalf("Hinted %d times, posted %v in the delay", n, posts)
	}
	// At the delay's end the call is refused, a progress period later
	// again, and accepted the next.
	clock.advance(t, time.Millisecond)
	for i, want := range []int32{0, 0, 1, 1, 1} {
		n, posts := hinted.Load(), a.postsOf()
		if calls := min(i+1, 3); n != want || len(posts) != calls {
			t.Fatalf("Hinted %d times after %d drain calls; want %d after %d (two refused, then one accepted)", n, len(posts), want, calls)
		}
		clock.advance(t, DefaultProgress)
	}
	clock.notOver(t)
}

// A release whose drain call is none has its hints out at once (there are
// none to send); one not yet read has not: its call may still come.
func TestHintedWithoutACall(t *testing.T) {
	for _, known := range []bool{true, false} {
		a, s, clock := &fakeAdmin{}, &fakeScanner{ports: []uint16{8080}}, newClock()
		cfg := config(a, s, clock)
		cfg.Call = callFor(ChooseCall(envoy.Version{Major: 1, Minor: 31}, known, true), known)
		var hinted atomic.Int32
		cfg.Hinted = func() { hinted.Add(1) }
		start(cfg, nil)
		clock.advance(t, 3*DefaultProgress)
		if n, want := hinted.Load(), map[bool]int32{true: 1, false: 0}[known]; n != want {
			t.Errorf("release known %v: Hinted %d times; want %d", known, n, want)
		}
	}
}

// A re-check sends no hint, so it says none.
func TestRecheckIsNotHinted(t *testing.T) {
	a, s, clock := &fakeAdmin{conns: 1}, &fakeScanner{}, newClock()
	cfg := config(a, s, clock)
	cfg.Recheck = true
	var hinted atomic.Int32
	cfg.Hinted = func() { hinted.Add(1) }
	start(cfg, nil)
	clock.advance(t, 3*DefaultProgress)
	clock.notOver(t)
	if n := hinted.Load(); n != 0 {
		t.Fatalf("a re-check was Hinted %d times", n)
	}
}
