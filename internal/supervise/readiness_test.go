package supervise

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The tracker hears of readiness first, and the readiness actor acts on it
// an instant later. WaitReady (what /v1/ready answers the app) says ready
// only once the lifecycle has noted the first readiness: the app's SIGTERM
// or preStop that follows the answer must find the proxy has been ready,
// or it would exit 143 or skip the drain.
func TestWaitReadyWaitsForTheLifecycle(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "LIVE\n")
	}))
	t.Cleanup(srv.Close)
	admin, err := http1.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Command: []string{"true"}, AdminURL: admin, ControlDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.reaper.Stop) // never run: give back what New took
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.tracker.Run(ctx); close(done) }() // the tracker alone: no readiness actor
	t.Cleanup(func() { cancel(); <-done })
	proctest.Eventually(t, 5*time.Second, "the tracker sees the proxy ready", func() bool {
		st, _ := s.tracker.Status()
		return st.Ready
	})

	early, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	ok, _ := s.WaitReady(early)
	stop()
	if ok {
		t.Fatal("WaitReady said ready before the lifecycle noted the proxy's first readiness")
	}

	// What the readiness actor does with the change (the socket aside).
	changes, _ := s.tracker.Changes()
	if len(changes) == 0 || !changes[len(changes)-1].Now.Ready {
		t.Fatalf("the tracker kept %+v; want its change to ready", changes)
	}
	if !s.life.becameReady(changes[len(changes)-1].At, "test") {
		t.Fatal("the first readiness was not the first")
	}
	s.life.announceReady()
	wait, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if ok, why := s.WaitReady(wait); !ok {
		t.Fatalf("WaitReady = false (%s) once the lifecycle noted readiness", why)
	}
	if p, _ := s.life.current(); !s.life.everReady() || p != Ready {
		t.Errorf("after WaitReady: ever ready %v, phase %v; want true, ready", s.life.everReady(), p)
	}
}

// A state that holds is answered as such, every time: /v1/ready without a
// wait (its ctx ended on arrival) finds a proxy ready for a while ready,
// and /v1/drain?wait=0s after the drain's end finds it ended. A select
// that found both the state's channel and the ended ctx ready picked one
// at random: 16 to 25 of 40 readiness answers said "not yet noted", 15 to
// 23 of 40 drain answers said still-draining.
func TestAnEndedWaitAnswersAStateThatHolds(t *testing.T) {
	h := startSupervisor(t, func(h *harness, c *Config) { c.DrainMin = 0 })
	h.waitReady()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		if ok, why := h.s.WaitReady(gone); !ok {
			t.Fatalf("WaitReady with an ended ctx, try %d: not ready (%s) for a proxy ready for a while", i+1, why)
		}
	}
	if ok, why := h.s.Drain(context.Background()); !ok {
		t.Fatalf("preStop drain: %s", why)
	}
	for i := range 200 {
		if ok, why := h.s.Drain(gone); !ok || why != control.Drained {
			t.Fatalf("Drain with an ended ctx after the drain's end, try %d: %v, %q; want drained", i+1, ok, why)
		}
	}
	h.signal(syscall.SIGTERM)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
}
