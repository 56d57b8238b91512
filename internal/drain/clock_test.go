package drain

import (
	"fmt"
	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"sync"
	"testing"
	"time"
)

// fakeClock is a drain's time that moves only when the test says, step by
// step: advance fires the drain's timer at each time it is due on the way
// and waits for the check that follows, so that every check a real clock
// would make is made, at its time, and none overlaps a move of the clock.
// A drain uses one timer (its Reset is what ends each check), so the fake
// has one.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	c       chan time.Time
	when    time.Time // when the timer fires, if armed
	armed   bool
	busy    bool // fired, or new: the drain is checking and will arm it again
	stopped bool // the drain is over
	arms    int  // Resets: checks done, and an OpenScanner's closes put off
	changed chan struct{}
}

var _ clock.Clock = (*fakeClock)(nil)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		// An admin call's bound: the fake Admin answers at once, so it
		// never fires.
		return idleTimer{}
	}
	c.c = make(chan time.Time, 1)
	c.busy = true // the first check comes before the first wait
	c.set(d)
	return fakeTimer{c}
}

// set arms the timer d from now; held c.mu. A timer due already fires at
// once, as a time.Timer does.
func (c *fakeClock) set(d time.Duration) {
	c.when, c.armed = c.now.Add(d), true
	if d <= 0 {
		c.fire()
	}
	c.notify()
}

// fire sends the time on the timer's channel; held c.mu.
func (c *fakeClock) fire() {
	c.armed, c.busy = false, true
	select {
	case c.c <- c.now:
	default:
	}
}

// notify wakes whoever waits for a change; held c.mu.
func (c *fakeClock) notify() {
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

type fakeTimer struct{ c *fakeClock }

type idleTimer struct{}

func (idleTimer) C() <-chan time.Time      { return nil }
func (idleTimer) Reset(time.Duration) bool { return false }
func (idleTimer) Stop() bool               { return true }

func (t fakeTimer) C() <-chan time.Time { return t.c.c }

func (t fakeTimer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.armed
	// As a time.Timer's since Go 1.23: no stale time is received after.
	select {
	case <-c.c:
	default:
	}
	c.busy = false
	c.arms++
	c.set(d)
	return was
}

func (t fakeTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.armed
	c.armed, c.busy, c.stopped = false, false, true
	c.notify()
	return was
}

// await waits until cond holds, under c.mu, within a bound of real time.
func (c *fakeClock) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	bound := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		if cond() {
			c.mu.Unlock()
			return
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-bound:
			t.Fatalf("%s: not within 5s", what)
		}
	}
}

// parked waits until the drain waits on its timer, or is over.
func (c *fakeClock) parked(t *testing.T) {
	t.Helper()
	c.await(t, "the drain waiting on its timer", func() bool { return c.stopped || (c.c != nil && !c.busy) })
}

// checks waits until the drain has armed its timer n times in all (each
// check ends so) and waits on it again, or is over.
func (c *fakeClock) checks(t *testing.T, n int) {
	t.Helper()
	c.await(t, fmt.Sprintf("%d checks", n), func() bool { return c.stopped || (c.arms >= n && !c.busy) })
}

// advance moves the clock d on, step by step: each time the drain's timer
// is due on the way, the clock stops there, fires it and waits for the
// check it wakes. Once the drain is over the clock stays where it ended.
func (c *fakeClock) advance(t *testing.T, d time.Duration) {
	t.Helper()
	c.parked(t)
	c.mu.Lock()
	to := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		if c.stopped {
			c.mu.Unlock()
			return
		}
		if !c.armed || c.when.After(to) {
			c.now = to
			c.mu.Unlock()
			return
		}
		c.now = c.when
		c.fire()
		c.mu.Unlock()
		c.parked(t)
	}
}

// over reports whether the drain has ended.
func (c *fakeClock) over() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}
