// Package clocktest is a clock.Clock that moves only when a test says.
package clocktest

import (
	"slices"
	"sync"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
)

// Fake is a clock that stands still until Advance. A test asks it which
// timers are armed (WaitArmed), so that it moves the time only once the
// code under test has armed the timer it means to fire: a bound is then
// seen at its instant, with no tolerance.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	changed chan struct{} // closed on every arm
}

var _ clock.Clock = (*Fake)(nil)

// New is a Fake at a fixed instant.
func New() *Fake {
	return &Fake{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	t := &timer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the time by d, firing every timer due on the way, each at
// its own instant and in order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	to := f.now.Add(d)
	for {
		i := slices.IndexFunc(f.timers, func(t *timer) bool { return !t.when.After(to) })
		if i < 0 {
			break
		}
		for j, t := range f.timers {
			if t.when.Before(f.timers[i].when) {
				i = j
			}
		}
		t := f.timers[i]
		f.now = maxTime(f.now, t.when)
		t.fire()
	}
	f.now = to
	f.mu.Unlock()
}

// WaitArmed waits, for no longer than within of real time, until a timer
// is armed to fire at `at`, and reports whether one was.
func (f *Fake) WaitArmed(at time.Time, within time.Duration) bool {
	bound := time.NewTimer(within)
	defer bound.Stop()
	for {
		f.mu.Lock()
		armed := slices.ContainsFunc(f.timers, func(t *timer) bool { return t.when.Equal(at) })
		changed := f.changed
		f.mu.Unlock()
		if armed {
			return true
		}
		select {
		case <-changed:
		case <-bound.C:
			return false
		}
	}
}

// Next waits, for no longer than within of real time, until a timer is
// armed, and gives the earliest.
func (f *Fake) Next(within time.Duration) (time.Time, bool) {
	bound := time.NewTimer(within)
	defer bound.Stop()
	for {
		f.mu.Lock()
		armed, changed := len(f.timers) > 0, f.changed
		f.mu.Unlock()
		if armed {
			return f.Armed()[0], true
		}
		select {
		case <-changed:
		case <-bound.C:
			return time.Time{}, false
		}
	}
}

// AdvanceUntil moves the time from one armed timer to the next, as fast as
// the code under test arms them, until done is closed; it reports false if
// that takes longer than within of real time.
func (f *Fake) AdvanceUntil(done <-chan struct{}, within time.Duration) bool {
	bound := time.Now().Add(within)
	for {
		select {
		case <-done:
			return true
		default:
		}
		if time.Now().After(bound) {
			return false
		}
		if at, ok := f.Next(100 * time.Millisecond); ok {
			f.Advance(at.Sub(f.Now()))
		}
	}
}

// Armed is when each armed timer fires, earliest first.
func (f *Fake) Armed() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var at []time.Time
	for _, t := range f.timers {
		at = append(at, t.when)
	}
	slices.SortFunc(at, time.Time.Compare)
	return at
}

type timer struct {
	f    *Fake
	c    chan time.Time
	when time.Time
}

func (t *timer) C() <-chan time.Time { return t.c }

func (t *timer) Reset(d time.Duration) bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	was := t.disarm()
	t.when = f.now.Add(d)
	if d <= 0 {
		t.fire()
		return was
	}
	f.timers = append(f.timers, t)
	close(f.changed)
	f.changed = make(chan struct{})
	return was
}

func (t *timer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.disarm()
}

// disarm takes t off the armed list; the caller holds f.mu.
func (t *timer) disarm() bool {
	n := len(t.f.timers)
	t.f.timers = slices.DeleteFunc(t.f.timers, func(o *timer) bool { return o == t })
	return len(t.f.timers) < n
}

// fire sends the time and disarms t; the caller holds f.mu.
func (t *timer) fire() {
	t.disarm()
	select {
	case t.c <- t.f.now:
	default:
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
