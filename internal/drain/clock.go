package drain

import "time"

// Clock is a drain's time: it reads it, and between two checks it waits on
// one timer. A test's clock moves only when the test says, and tells it
// when the drain has armed its timer again: a check is done.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is what a drain uses of a time.Timer.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// systemClock is the time of the system.
type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
