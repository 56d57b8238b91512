// Package clock is the supervisor's time: the termination's timers, the
// proxy's stop escalation and the drain's pacing and admin-call bounds all
// read it, so that a test can replace it with one it moves itself
// (clocktest.Fake) and see each bound at its instant.
package clock

import (
	"context"
	"time"
)

// Clock reads the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is what is used of a time.Timer.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// System is the time of the system.
var System Clock = system{}

type system struct{}

func (system) Now() time.Time                 { return time.Now() }
func (system) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }

// Or is c, or System when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return System
	}
	return c
}

// WithTimeout is context.WithTimeout on c's time: the context ends once d
// has passed on c (or its parent ends). On a clock other than the system's
// its Err is then context.Canceled: what is bounded only needs its end.
func WithTimeout(parent context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := c.(system); ok {
		return context.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancel(parent)
	t := c.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
