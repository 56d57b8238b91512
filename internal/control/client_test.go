package control

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// countDials makes c count the connections it opens.
func countDials(c *Client) *atomic.Int32 {
	var n atomic.Int32
	dial := c.http.Dial
	c.http.Dial = func(ctx context.Context) (net.Conn, error) {
		n.Add(1)
		return dial(ctx)
	}
	return &n
}

// httpIn serves h on the control socket of a new control dir, with an
// ordinary HTTP server, and returns a client of it and the server's
// connections that are idle, kept open between requests.
func httpIn(t *testing.T, h http.Handler) (*Client, func() []net.Conn) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Dir(SocketPath(dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	idle := map[net.Conn]bool{}
	srv := &http.Server{Handler: h, ConnState: func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if s == http.StateIdle {
			idle[c] = true
		} else {
			delete(idle, c)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return NewClient(dir), func() []net.Conn {
		mu.Lock()
		defer mu.Unlock()
		var out []net.Conn
		for c := range idle {
			out = append(out, c)
		}
		return out
	}
}

// exec asks for readiness and then reports its completion: both go over
// one connection while the supervisor keeps it open.
func TestReadyAndCompleteShareAConnection(t *testing.T) {
	b := newBackend()
	close(b.ready)
	_, c := serve(t, b, nil)
	dials := countDials(c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, why, err := c.Ready(ctx, time.Second); !ok || err != nil {
		t.Fatalf("Ready: %v %q %v", ok, why, err)
	}
	if err := c.Complete(ctx, Completion{Peer: "app", Code: 0}); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections for a readiness request and a completion, want 1", n)
	}
}

// A supervisor that closed the kept connection (its idle timeout, a
// restart) gets the request again on a new one.
func TestRequestAfterTheServerClosedTheKeptConnection(t *testing.T) {
	c, idle := httpIn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	dials := countDials(c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Complete(ctx, Completion{Peer: "app", Code: 0}); err != nil {
		t.Fatal(err)
	}
	var kept []net.Conn
	proctest.Eventually(t, 5*time.Second, "the server keeps the connection", func() bool {
		kept = idle()
		return kept != nil
	})
	for _, cn := range kept {
		cn.Close()
	}
	if err := c.Complete(ctx, Completion{Peer: "app", Code: 0}); err != nil {
		t.Fatalf("after the server closed the kept connection: %v", err)
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// A 4xx without the supervisor's JSON is refused with its status line.
func TestRefusalWithoutJSON(t *testing.T) {
	c, _ := httpIn(t, http.NotFoundHandler())
	_, err := c.Status(context.Background())
	var e *APIError
	if !errors.As(err, &e) || e.Code != 404 || e.Msg != "404 Not Found" || !Rejected(err) {
		t.Fatalf("a 404 with a text body: %v", err)
	}
}

// An answer larger than any of the supervisor's is an error, not JSON cut
// short.
func TestAnswerTooLarge(t *testing.T) {
	c, _ := httpIn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`"` + strings.Repeat("x", maxAnswer) + `"`))
	}))
	_, err := c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), c.Path()) {
		t.Fatalf("an answer of %d bytes: %v", maxAnswer+2, err)
	}
}

// A socket file that nothing listens on any more refuses connections: no
// supervisor, as much as a missing file.
func TestUnavailableWhenRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Dir(SocketPath(dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	c := NewClient(dir)
	_, err = c.Status(context.Background())
	if !Unavailable(err) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), c.Path()) {
		t.Fatalf("a socket file nothing listens on: %v", err)
	}
}

// A server of an untrusted uid is refused with the *UntrustedError itself,
// whose one line says all.
func TestUntrustedThroughTheClient(t *testing.T) {
	s, c := serve(t, newBackend(), nil)
	c.http.Dial = func(ctx context.Context) (net.Conn, error) { return dialTrusted(ctx, s.Path(), []uint32{4242}) }
	_, err := c.Status(context.Background())
	var u *UntrustedError
	if !errors.As(err, &u) || err.Error() != u.Error() || !Rejected(err) {
		t.Fatalf("a server of uid %d trusting only 4242: %v", os.Geteuid(), err)
	}
}

// The connection that proved the ready mark carries the completion (exec's
// next request) while the server keeps it; once the server has closed it
// (its wait for a first request), the completion goes on a new one.
func TestTheMarksConnectionCarriesTheCompletion(t *testing.T) {
	for _, tc := range []struct {
		name      string
		headWait  time.Duration
		wantDials int32
	}{
		{"kept", 5 * time.Second, 0},
		{"closed by the server", 500 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend()
			close(b.ready)
			s := serveTuned(t, b, func(c *http1.Config) { c.HeadTimeout = tc.headWait })
			c := NewClient(filepath.Dir(filepath.Dir(s.path)))
			s.MarkReady(true)
			if conn, ok := c.dialMarked(context.Background()); !ok {
				t.Skip("the socket file cannot carry the mark here")
			} else {
				conn.Close()
			}
			dials := countDials(c) // dials besides the mark's own
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if ok, why, err := c.Ready(ctx, time.Second); !ok || err != nil {
				t.Fatalf("Ready: %v %q %v", ok, why, err)
			}
			proctest.Eventually(t, 5*time.Second, "the server holds the mark's connection", func() bool { return openConns(s) == 1 })
			if tc.headWait < time.Second {
				proctest.Eventually(t, 5*time.Second, "the server closes the unused connection", func() bool { return openConns(s) == 0 })
			}
			if err := c.Complete(ctx, Completion{Peer: "app", Code: 0}); err != nil {
				t.Fatal(err)
			}
			if n := dials.Load(); n != tc.wantDials {
				t.Fatalf("%d connections for the completion after the mark's, want %d", n, tc.wantDials)
			}
		})
	}
}
