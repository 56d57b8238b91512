package app

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// refusingSupervisor serves the control socket in a new control dir and
// answers every request with 403 and a JSON error, as a supervisor does for
// a uid outside --allowed-uids. It counts the requests.
func refusingSupervisor(t *testing.T) (dir string, hits *atomic.Int64) {
	t.Helper()
	dir = t.TempDir()
	if err := peers.Open(dir).Create(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Dir(control.SocketPath(dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", control.SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	hits = new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"error":"uid 0 is not in --allowed-uids"}` + "\n"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return dir, hits
}

// A refusal (4xx) is final: the client exits at once, non-zero, with the
// supervisor's error, instead of asking again every 10 ms until its timeout
// (and making the supervisor log a warning per try).
func TestRefusedClientExitsAtOnce(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	tests := []struct {
		name    string
		run     func(s Socket, stderr io.Writer) int
		code    int
		maxHits int64
	}{
		{"wait", func(s Socket, stderr io.Writer) int { return Wait(s, 30*time.Second, stderr) }, 1, 1},
		// exec asks once for readiness and once to report its not-ready
		// end; it never runs the command.
		{"exec", func(s Socket, stderr io.Writer) int {
			return Exec(Peer{s, "app"}, []string{"/bin/touch", ran}, 30*time.Second, Hooks{}, stderr)
		}, peers.NotReadyCode, 2},
		{"complete", func(s Socket, stderr io.Writer) int { return Complete(Peer{s, "app"}, 3, 30*time.Second, stderr) }, 1, 1},
		{"prestop", func(s Socket, stderr io.Writer) int { return Prestop(s, 30*time.Second, io.Discard, stderr) }, 1, 1},
		{"status", func(s Socket, stderr io.Writer) int { return Status(s, io.Discard, stderr) }, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, hits := refusingSupervisor(t)
			var stderr bytes.Buffer
			start := time.Now()
			code := tt.run(Socket{Dir: dir}, &stderr)
			took := time.Since(start)
			if code != tt.code || !strings.Contains(stderr.String(), "uid 0 is not in --allowed-uids") {
				t.Fatalf("exit %d, want %d with the supervisor's error; stderr:\n%s", code, tt.code, stderr.String())
			}
			if took > 2*time.Second || hits.Load() > tt.maxHits {
				t.Fatalf("took %v and %d requests; want at once, at most %d requests", took, hits.Load(), tt.maxHits)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("exec ran its command")
			}
		})
	}
}

// wait --url polls until the URL answers 200, and says the last answer when
// it gives up; a redirect is that answer, not followed.
func TestWaitURL(t *testing.T) {
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/moved":
			http.Redirect(w, r, "/ready", http.StatusFound)
		case polls.Add(1) < 3:
			http.Error(w, "not ready: DNS", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	wait := func(url string, timeout time.Duration) (int, string) {
		u, err := http1.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		return WaitURL(u, timeout, &stderr), stderr.String()
	}
	if code, stderr := wait(srv.URL+"/ready", 10*time.Second); code != 0 || polls.Load() != 3 {
		t.Fatalf("exit %d after %d polls, want 0 after 3; stderr:\n%s", code, polls.Load(), stderr)
	}
	// Long enough for a busy machine's first answer; a try cut by the
	// deadline after it does not replace it.
	code, stderr := wait(srv.URL+"/moved", 2*time.Second)
	if code != 1 || !strings.Contains(stderr, "answered 302") {
		t.Fatalf("a redirect: exit %d, want 1 with the 302; stderr:\n%s", code, stderr)
	}
}

// A try that its own second cuts (a starved client, a URL that stops
// answering) does not replace the answer before it.
func TestWaitURLKeepsTheAnswerOverALaterCut(t *testing.T) {
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if polls.Add(1) == 1 {
			http.Error(w, "not ready: DNS", http.StatusServiceUnavailable)
			return
		}
		<-r.Context().Done() // past the try's second: the client's cut
	}))
	defer srv.Close()
	u, err := http1.ParseURL(srv.URL + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	// Long enough for a first answer and one whole cut try after it.
	if code := WaitURL(u, 2500*time.Millisecond, &stderr); code != 1 || !strings.Contains(stderr.String(), "503") {
		t.Fatalf("exit %d after %d tries, want 1 with the first try's 503; stderr:\n%s", code, polls.Load(), stderr.String())
	}
}

// slowSecondPoll is a supervisor whose proxy never gets ready: it answers
// the first long poll with Envoy's state at its end, and the next one only
// after the client's own deadline.
type slowSecondPoll struct{ polls atomic.Int32 }

func (b *slowSecondPoll) WaitReady(ctx context.Context) (bool, string) {
	<-ctx.Done()
	if b.polls.Add(1) > 1 {
		time.Sleep(time.Second) // past the client's deadline: the scenario
	}
	return false, "Envoy is INITIALIZING"
}
func (b *slowSecondPoll) Complete(context.Context, control.Completion) error { return nil }
func (b *slowSecondPoll) Drain(context.Context) (bool, string)               { return false, "" }
func (b *slowSecondPoll) Status() control.Status                             { return control.Status{} }

// A wait that its deadline cuts in the middle of a long poll gives the
// server's last reason, not the cut: the connection's deadline can fire
// before the context's own timer, so the error is all the client sees.
func TestWaitGivesTheLastReasonWhenItsDeadlineCutsAPoll(t *testing.T) {
	dir := t.TempDir()
	b := &slowSecondPoll{}
	s := control.New(dir, b, nil, slog.New(slog.DiscardHandler))
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	ready, why, refused := waitReady(context.Background(), control.NewClient(dir), time.Second)
	if ready || refused != nil {
		t.Fatalf("ready %v, refused %v", ready, refused)
	}
	if b.polls.Load() < 2 {
		t.Fatalf("%d long polls; the test needs a second one to be cut", b.polls.Load())
	}
	if why != "Envoy is INITIALIZING" {
		t.Fatalf("why %q, want the server's last reason", why)
	}
}
