package supervise

import (
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
)

func newTestLifecycle() (*lifecycle, *[]Phase) {
	var seen []Phase
	return newLifecycle(slog.New(slog.NewTextHandler(io.Discard, nil)), clock.System, func(p Phase) { seen = append(seen, p) }), &seen
}

func TestLifecycleMoves(t *testing.T) {
	tests := []struct {
		name  string
		moves []Phase
		legal []bool
		end   Phase
	}{
		{"a Job", []Phase{Ready, Stopping, Exited}, []bool{true, true, true}, Exited},
		{"a deletion", []Phase{Ready, Draining, Stopping, Exited}, []bool{true, true, true, true}, Exited},
		{"no drain before ready", []Phase{Draining, Ready, Draining, Stopping}, []bool{false, true, true, true}, Stopping},
		{"a crash while starting", []Phase{Exited, Ready, Stopping}, []bool{true, false, false}, Exited},
		{"no way back", []Phase{Ready, Stopping, Draining, Ready, Starting}, []bool{true, true, false, false, false}, Stopping},
		{"a second stop", []Phase{Stopping, Stopping}, []bool{true, false}, Stopping},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, seen := newTestLifecycle()
			want := []Phase{Starting}
			for i, to := range tt.moves {
				if _, ok := l.move(to, "test"); ok != tt.legal[i] {
					t.Errorf("move %d to %v: ok %v, want %v", i, to, ok, tt.legal[i])
				}
				if tt.legal[i] {
					want = append(want, to)
				}
			}
			if got := l.snapshot().phase; got != tt.end {
				t.Errorf("phase %v, want %v", got, tt.end)
			}
			// The gauge hears of every applied move, and of nothing else.
			if len(*seen) != len(want) {
				t.Fatalf("gauge saw %v, want %v", *seen, want)
			}
			for i := range want {
				if (*seen)[i] != want[i] {
					t.Fatalf("gauge saw %v, want %v", *seen, want)
				}
			}
		})
	}
}

func TestBeginDrainIsShared(t *testing.T) {
	l, _ := newTestLifecycle()
	l.move(Ready, "test")
	run, isNew := l.beginDrain("preStop")
	if run == nil || !isNew {
		t.Fatalf("first preStop: run %v, new %v", run != nil, isNew)
	}
	again, isNew := l.beginDrain("SIGTERM")
	if again != run || isNew {
		t.Fatalf("SIGTERM joins the drain: same %v, new %v", again == run, isNew)
	}
	if v := l.snapshot(); v.phase != Draining || !v.draining {
		t.Fatalf("view %+v", v)
	}
	l.move(Stopping, "drained")
	if run, _ := l.beginDrain("preStop"); run != nil {
		t.Fatal("a drain began while stopping")
	}
	if !l.snapshot().draining {
		t.Fatal("the drain that happened is forgotten")
	}
}

func TestBeginDrainAfterStopHasNothingToDrain(t *testing.T) {
	l, _ := newTestLifecycle()
	l.move(Stopping, "peers completed")
	if run, _ := l.beginDrain("preStop"); run != nil {
		t.Fatal("a drain began while stopping")
	}
}

// Events race in from many goroutines; exactly one fixes the code, and it
// stays fixed.
func TestRecordConcurrentFirstWins(t *testing.T) {
	l, _ := newTestLifecycle()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { l.record(Event{Kind: ProxyExit, Code: i}) })
	}
	wg.Wait()
	code, _, fixed := l.exitCode()
	if !fixed {
		t.Fatal("no code fixed")
	}
	for range 10 {
		l.record(Event{Kind: ProxyExit, Code: 99})
	}
	if again, _, _ := l.exitCode(); again != code {
		t.Fatalf("code moved from %d to %d", code, again)
	}
}

// Once a stop is decided, the proxy's first readiness is refused for good
// (issue 26, 2.2): every decisive event before it stops the proxy, even in
// the instant before the move to Stopping.
func TestNoFirstReadinessOnceAStopIsDecided(t *testing.T) {
	for _, tt := range []struct {
		name   string
		before func(l *lifecycle)
	}{
		{"SIGTERM recorded, not yet stopping", func(l *lifecycle) { l.record(Event{Kind: Signal, Signal: syscall.SIGTERM}) }},
		{"stopping", func(l *lifecycle) { l.move(Stopping, "peers completed") }},
		{"exited", func(l *lifecycle) { l.move(Exited, "crashed") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newTestLifecycle()
			tt.before(l)
			if l.becameReady(time.Now(), "test") {
				t.Fatal("the first readiness was taken after the stop")
			}
			if v := l.snapshot(); l.everReady() || !v.readyAt.IsZero() || v.phase == Ready {
				t.Fatalf("ever ready %v, view %+v", l.everReady(), v)
			}
			if l.neverReady() == "" {
				t.Fatal("no reason given for a readiness that will never come")
			}
		})
	}
	// A preStop before readiness decides nothing and stops nothing.
	l, _ := newTestLifecycle()
	if ready := l.record(Event{Kind: PreStop}); ready {
		t.Fatal("record says ready before any readiness")
	}
	if !l.becameReady(time.Now(), "test") || l.neverReady() != "" {
		t.Fatal("a preStop before readiness refused it")
	}
	// Whether the proxy has been ready is the lifecycle's to say.
	if ready := l.record(Event{Kind: Signal, Signal: syscall.SIGTERM}); !ready {
		t.Fatal("record says not ready after the first readiness")
	}
	if code, _, _ := l.exitCode(); code != 0 {
		t.Fatalf("SIGTERM after readiness decided %d, want 0", code)
	}
}
