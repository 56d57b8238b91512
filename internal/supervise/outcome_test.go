package supervise

import (
	"fmt"
	"sync"
	"testing"
)

func TestOutcomeFirstDecisiveEventWins(t *testing.T) {
	type event struct {
		code int
		why  string
	}
	tests := []struct {
		name    string
		events  []event
		wantWon []bool
		code    int
		why     string
	}{
		{name: "nothing decided", code: 0, why: ""},
		{name: "one event", events: []event{{3, "peer job failed"}}, wantWon: []bool{true}, code: 3, why: "peer job failed"},
		{
			name:    "success then proxy crash keeps 0",
			events:  []event{{0, "every peer succeeded"}, {139, "proxy exited by itself"}},
			wantWon: []bool{true, false}, code: 0, why: "every peer succeeded",
		},
		{
			name:    "SIGTERM before ready then completion keeps 143",
			events:  []event{{143, "SIGTERM"}, {0, "every peer succeeded"}, {137, "proxy exited by itself"}},
			wantWon: []bool{true, false, false}, code: 143, why: "SIGTERM",
		},
		{
			name:    "a later identical event does not win again",
			events:  []event{{1, "a"}, {1, "a"}},
			wantWon: []bool{true, false}, code: 1, why: "a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o outcome
			if o.decided() {
				t.Fatal("zero outcome is decided")
			}
			for i, e := range tt.events {
				if got := o.decide(e.code, e.why); got != tt.wantWon[i] {
					t.Errorf("decide(%d, %q) = %v, want %v", e.code, e.why, got, tt.wantWon[i])
				}
				if !o.decided() {
					t.Errorf("not decided after decide(%d, %q)", e.code, e.why)
				}
			}
			if code, why := o.get(); code != tt.code || why != tt.why {
				t.Errorf("get() = %d, %q; want %d, %q", code, why, tt.code, tt.why)
			}
			if got, want := o.decided(), len(tt.events) > 0; got != want {
				t.Errorf("decided() = %v, want %v", got, want)
			}
		})
	}
}

func TestOutcomeConcurrentDecideHasOneWinner(t *testing.T) {
	for round := range 20 {
		var o outcome
		const n = 64
		won := make([]bool, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				won[i] = o.decide(i+1, fmt.Sprint("event ", i+1))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, w := range won {
			if !w {
				continue
			}
			if winner >= 0 {
				t.Fatalf("round %d: both %d and %d won", round, winner+1, i+1)
			}
			winner = i
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won", round)
		}
		code, why := o.get()
		if code != winner+1 || why != fmt.Sprint("event ", winner+1) {
			t.Fatalf("round %d: get() = %d, %q; the winner was %d", round, code, why, winner+1)
		}
	}
}
