package clocktest

import (
	"testing"
	"time"
)

// Advance fires each timer due on the way at its own instant, in order, and
// none that is not due; a stopped or re-armed timer fires as it now says.
func TestAdvanceFiresInOrder(t *testing.T) {
	f := New()
	start := f.Now()
	late, early, stopped, moved := f.NewTimer(3*time.Second), f.NewTimer(time.Second), f.NewTimer(2*time.Second), f.NewTimer(time.Hour)
	stopped.Stop()
	moved.Reset(4 * time.Second)
	if !f.WaitArmed(start.Add(4*time.Second), time.Second) || f.WaitArmed(start.Add(time.Hour), 0) {
		t.Fatalf("armed at %v; want the moved timer at 4s, not at 1h", f.Armed())
	}
	f.Advance(3 * time.Second)
	for _, c := range []struct {
		name string
		tm   interface{ C() <-chan time.Time }
		at   time.Duration
	}{{"early", early, time.Second}, {"late", late, 3 * time.Second}} {
		select {
		case got := <-c.tm.C():
			if got.Sub(start) != c.at {
				t.Errorf("%s fired at %v, want %v", c.name, got.Sub(start), c.at)
			}
		default:
			t.Errorf("%s did not fire", c.name)
		}
	}
	select {
	case <-stopped.C():
		t.Error("a stopped timer fired")
	case <-moved.C():
		t.Error("a timer fired before it was due")
	default:
	}
	if at, ok := f.Next(time.Second); !ok || at.Sub(start) != 4*time.Second {
		t.Errorf("next armed %v, %v; want 4s", at.Sub(start), ok)
	}
	if f.Now().Sub(start) != 3*time.Second {
		t.Errorf("now %v, want 3s", f.Now().Sub(start))
	}
}
