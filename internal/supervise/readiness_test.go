package supervise

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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
