package envoy

import (
	"testing"
)

// With Keep, a reader that comes late still gets every change, in order,
// each with the status before it; the latest status alone would have lost
// the refusal in between. Without Keep nothing piles up.
func TestChangesKeepsEveryChange(t *testing.T) {
	tr := NewTracker(&Admin{}, TrackerConfig{Keep: true})
	_, more := tr.Changes()
	ready := Status{Ready: true, Reason: "LIVE"}
	down := Status{Reason: "admin API refuses connections", Down: true}
	tr.set(ready)
	tr.set(ready) // no change
	tr.set(down)
	tr.Gone("proxy exited")
	tr.set(ready) // after Gone: nothing
	select {
	case <-more:
	default:
		t.Fatal("the channel was not closed at the change")
	}
	got, _ := tr.Changes()
	want := []Status{ready, down, {Reason: "proxy exited"}}
	if len(got) != len(want) {
		t.Fatalf("%d changes, want %d: %+v", len(got), len(want), got)
	}
	old := Status{Reason: "proxy starting"}
	for i, c := range got {
		if c.Old != old || c.Now != want[i] || c.At.IsZero() {
			t.Errorf("change %d = %+v; want %+v after %+v", i, c, want[i], old)
		}
		old = want[i]
	}
	if again, _ := tr.Changes(); len(again) != 0 {
		t.Errorf("changes taken twice: %+v", again)
	}

	plain := NewTracker(&Admin{}, TrackerConfig{})
	plain.set(ready)
	if got, _ := plain.Changes(); len(got) != 0 {
		t.Errorf("kept %d changes without Keep", len(got))
	}
}
