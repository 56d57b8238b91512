package drain

import (
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
)

type quietAdmin struct{}

func (quietAdmin) Post(context.Context, string, ...string) error { return nil }
func (quietAdmin) Connections(context.Context, []uint16) (envoy.Connections, error) {
	return envoy.Connections{}, nil
}
func (quietAdmin) ListenerPorts(context.Context) ([]uint16, error) { return nil, nil }

// listeningApp is an app that never stops listening on 8080; it counts scans.
type listeningApp struct{ scans atomic.Int64 }

func (s *listeningApp) Listening() ([]portwatch.Socket, error) {
	s.scans.Add(1)
	return []portwatch.Socket{{Addr: netip.MustParseAddrPort("127.0.0.1:8080"), UID: 1000}}, nil
}

// TestDefaultPacingWhileAppListens: without an OpenScanner (the /proc fallback, a
// kernel without the destroy broadcast) a drain waiting on a listening app
// wakes the supervisor once per tick, and each wake costs 0.15-0.4 ms of
// CPU on a small VM, so the default tick must keep it to at most 25 scans a
// second; the reaction to the port's close is then one tick, 40 ms, on top
// of the quiet period.
func TestDefaultPacingWhileAppListens(t *testing.T) {
	app, clock := &listeningApp{}, newClock()
	const wait = time.Second
	res := start(Config{Admin: quietAdmin{}, Scanner: app, Owner: portwatch.Owner{AdminPort: 15000, ProxyUID: -1}, Timeout: wait,
		Clock: clock, Log: slog.New(slog.DiscardHandler)}, nil)
	clock.advance(t, wait)
	if r := within(t, res, 5*time.Second); r.End != TimedOut {
		t.Fatalf("drain ended %s, want timeout", r.End)
	}
	// One scan at the start, then one a tick.
	if n, most := app.scans.Load(), int64(wait/(40*time.Millisecond))+1; n > most {
		t.Errorf("%d scans in %v, want at most %d", n, wait, most)
	}
	if DefaultTick > 40*time.Millisecond {
		t.Errorf("DefaultTick %v would add more than 40 ms to prestop's reaction", DefaultTick)
	}
}

// fakeOpenScanner is an OpenScanner on a fakeScanner: the test says when a close is
// reported. It counts scans.
type fakeOpenScanner struct {
	*fakeScanner
	closed chan struct{}
	scans  atomic.Int64
	shut   atomic.Bool
}

func newFakeOpenScanner(ports ...uint16) *fakeOpenScanner {
	return &fakeOpenScanner{fakeScanner: &fakeScanner{ports: ports}, closed: make(chan struct{}, 1)}
}

func (w *fakeOpenScanner) Listening() ([]portwatch.Socket, error) {
	w.scans.Add(1)
	return w.fakeScanner.Listening()
}
func (w *fakeOpenScanner) Closed() <-chan struct{} { return w.closed }
func (w *fakeOpenScanner) Close()                  { w.shut.Store(true) }

func watched(w *fakeOpenScanner, clock *fakeClock, timeout time.Duration) Config {
	return Config{Admin: quietAdmin{}, Scanner: &listeningApp{}, OpenScanner: func() OpenScanner { return w },
		Owner: portwatch.Owner{AdminPort: 15000, ProxyUID: -1}, Timeout: timeout, Clock: clock, Log: slog.New(slog.DiscardHandler)}
}

// TestWatchedPacingWhileAppListens: with an OpenScanner to report the app's close,
// a drain waiting on a listening app scans only every WatchedTick (the
// OpenScanner stands in for the Scanner), and still stops at its bound.
func TestWatchedPacingWhileAppListens(t *testing.T) {
	w, clock := newFakeOpenScanner(8080), newClock()
	const wait = time.Second
	res := start(watched(w, clock, wait), nil)
	clock.advance(t, wait)
	r := within(t, res, 5*time.Second)
	if r.End != TimedOut {
		t.Fatalf("drain ended %s, want timeout", r.End)
	}
	if n, most := w.scans.Load(), int64(wait/DefaultWatchedTick)+1; n > most {
		t.Errorf("%d scans in %v, want at most %d", n, wait, most)
	}
	took(t, r, wait, wait)
	if !w.shut.Load() {
		t.Error("the OpenScanner was left open")
	}
	if DefaultWatchedTick > DefaultQuiet {
		t.Errorf("DefaultWatchedTick %v: a close the OpenScanner misses would wait longer than the quiet period", DefaultWatchedTick)
	}
}

// A close the OpenScanner reports is seen at once, not at the next WatchedTick:
// the drain scans again though its clock has not moved.
func TestWatchedCloseSeenAtOnce(t *testing.T) {
	w, clock := newFakeOpenScanner(8080), newClock()
	cfg := watched(w, clock, 20*time.Second)
	cfg.WatchedTick = time.Hour
	res := start(cfg, nil)
	clock.checks(t, 1)
	w.fakeScanner.close()
	w.closed <- struct{}{}
	clock.checks(t, 2)
	if n := w.scans.Load(); n != 2 {
		t.Fatalf("%d scans; want a second one at the close", n)
	}
	clock.advance(t, DefaultQuiet)
	r := within(t, res, 5*time.Second)
	if r.End != Drained {
		t.Fatalf("end %q", r.End)
	}
	took(t, r, DefaultQuiet, DefaultQuiet)
}

// An OpenScanner that can tell no more (its channel closed) leaves the drain
// polling every Tick.
func TestOpenScannerThatStopsTellingIsPolled(t *testing.T) {
	w, clock := newFakeOpenScanner(8080), newClock()
	cfg := watched(w, clock, 20*time.Second)
	cfg.WatchedTick = time.Hour
	res := start(cfg, nil)
	clock.checks(t, 1)
	close(w.closed)
	clock.checks(t, 2)
	w.fakeScanner.close() // unreported
	clock.advance(t, DefaultTick+DefaultQuiet)
	r := within(t, res, 5*time.Second)
	if r.End != Drained {
		t.Fatalf("end %q", r.End)
	}
	took(t, r, DefaultTick+DefaultQuiet, DefaultTick+DefaultQuiet)
}

// An app that churns sockets it never connects makes the kernel report a
// destroyed socket without a peer port again and again: the drain acts on
// those reports no more often than every Tick.
func TestWatchedChurnScansAtMostEveryTick(t *testing.T) {
	w, clock := newFakeOpenScanner(8080), newClock()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case w.closed <- struct{}{}:
			case <-stop:
				return
			}
		}
	}()
	const wait = time.Second
	res := start(watched(w, clock, wait), nil)
	clock.advance(t, wait)
	if r := within(t, res, 5*time.Second); r.End != TimedOut {
		t.Fatalf("drain ended %s, want timeout", r.End)
	}
	if n, most := w.scans.Load(), int64(wait/DefaultTick+wait/DefaultWatchedTick)+2; n > most {
		t.Errorf("%d scans in %v of churn, want at most %d", n, wait, most)
	}
}
