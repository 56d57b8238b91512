package envoy

// The admin API and readiness URL clients speak HTTP/1.1 through
// internal/http1: what these tests hold is what a hand-written client risks
// getting wrong against a real server (net/http's, as Envoy's stand-in).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// adminOf serves h as an admin API and returns a client of it, and a count
// of the connections the server accepted.
func adminOf(t *testing.T, h http.HandlerFunc) (*Admin, *httptest.Server, *atomic.Int32) {
	t.Helper()
	srv, conns := countingServer(t, h)
	a, err := adminFor(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return a, srv, conns
}

// countingServer is an httptest server that counts the connections it
// accepts.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	conns := new(atomic.Int32)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

// statLines writes n stats, flushing as it goes, as Envoy's /stats does:
// the answer comes chunked.
func statLines(w http.ResponseWriter, n int) {
	for i := range n {
		fmt.Fprintf(w, "cluster.outbound|%d||svc.ns.svc.cluster.local.upstream_cx_total: %d\n", i, i)
		if i%1000 == 0 {
			w.(http.Flusher).Flush()
		}
	}
}

// Envoy answers /stats chunked in recent versions; every chunk counts.
func TestStatsChunked(t *testing.T) {
	const n = 20000 // about 1.3 MB
	a, srv, _ := adminOf(t, func(w http.ResponseWriter, r *http.Request) {
		statLines(w, n)
		fmt.Fprintln(w, "listener.0.0.0.0_15006.downstream_cx_active: 7")
	})
	resp, err := http.Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("the server's answer is not chunked: %v", resp.TransferEncoding)
	}
	stats, err := a.Stats(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != n+1 || stats["listener.0.0.0.0_15006.downstream_cx_active"] != 7 {
		t.Fatalf("%d stats, the last %d; want %d and 7", len(stats), stats["listener.0.0.0.0_15006.downstream_cx_active"], n+1)
	}
}

// The admin queries go as Envoy reads them: flags as bare keys in the
// order given (the drain call as the supervisor's log names it), values
// escaped as a query component.
func TestAdminQueries(t *testing.T) {
	targets := make(chan string, 1)
	a, _, _ := adminOf(t, func(w http.ResponseWriter, r *http.Request) {
		targets <- r.RequestURI
		fmt.Fprintln(w, `{"listener_statuses": []}`)
	})
	ctx := context.Background()
	for _, tt := range []struct {
		call func() error
		want string
	}{
		{func() error { _, err := a.Stats(ctx, ""); return err }, "/stats?usedonly"},
		{func() error { _, err := a.Stats(ctx, `^listener\..*_15006\.downstream_cx_active$`); return err },
			"/stats?usedonly&filter=%5Elistener%5C..%2A_15006%5C.downstream_cx_active%24"},
		{func() error { _, err := a.ListenerPorts(ctx); return err }, "/listeners?format=json"},
		{func() error { return a.Post(ctx, "/drain_listeners", "graceful", "inboundonly", "skip_exit") },
			"/drain_listeners?graceful&inboundonly&skip_exit"},
		{func() error { return a.Post(ctx, "/quitquitquit") }, "/quitquitquit"},
	} {
		if err := tt.call(); err != nil {
			t.Fatalf("%s: %v", tt.want, err)
		}
		if got := <-targets; got != tt.want {
			t.Errorf("asked %s, want %s", got, tt.want)
		}
	}
}

// An answer over maxBody is an error, chunked or not, never a cut-off
// /stats that would count fewer connections than there are.
func TestAdminAnswerOverTheBoundIsAnError(t *testing.T) {
	line := "listener.0.0.0.0_15006.downstream_cx_active: 1\n"
	lines := maxBody/len(line) + 1
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprint("chunked=", chunked), func(t *testing.T) {
			a, _, _ := adminOf(t, func(w http.ResponseWriter, r *http.Request) {
				if !chunked {
					w.Header().Set("Content-Length", fmt.Sprint(lines*len(line)))
				}
				for range lines {
					w.Write([]byte(line))
				}
			})
			c, err := a.Connections(context.Background(), nil)
			if !errors.Is(err, http1.ErrTooLarge) || !strings.Contains(err.Error(), "/stats") {
				t.Fatalf("an answer of %d bytes: %+v, %v; want an error", lines*len(line), c, err)
			}
		})
	}
}

// The tracker polls every 10 ms while the proxy starts: over one kept
// connection to the admin API, and one to the readiness URL, not a
// connection a poll.
func TestTrackerKeepsItsConnections(t *testing.T) {
	var polls atomic.Int32
	a, _, adminConns := adminOf(t, func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("PRE_INITIALIZING\n"))
	})
	urlSrv, urlConns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {})
	u, err := readyFor(urlSrv.URL + "/healthz/ready")
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(a, TrackerConfig{ExtraReady: u.Check})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	proctest.Eventually(t, 10*time.Second, "50 polls", func() bool { return polls.Load() >= 50 })
	if n := adminConns.Load(); n > 1 {
		t.Errorf("%d admin connections for %d polls, want 1", n, polls.Load())
	}
	// ExtraReady is asked only once Envoy is LIVE; ask it as often directly.
	for range 50 {
		if why := u.Check(context.Background()); why != "" {
			t.Fatal(why)
		}
	}
	if n := urlConns.Load(); n > 1 {
		t.Errorf("%d readiness URL connections for 50 checks, want 1", n)
	}
}

// An admin API that closed the kept connection (an Envoy restarted on the
// same port, say) gets the request again on a new connection: the poll
// sees the answer, not the dead connection.
func TestAdminAfterTheServerClosedItsConnections(t *testing.T) {
	a, srv, conns := adminOf(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("LIVE\n")) })
	for i := range 3 {
		if _, ready, err := a.ServerState(context.Background()); !ready || err != nil {
			t.Fatalf("poll %d: %v %v", i, ready, err)
		}
		srv.CloseClientConnections()
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

// A request cancelled in the middle of its answer ends at once with the
// cancellation, and its connection, whose answer is half read, is not
// kept for the next.
func TestAdminCancelledMidAnswer(t *testing.T) {
	started := make(chan struct{})
	var stall atomic.Bool
	stall.Store(true)
	a, _, conns := adminOf(t, func(w http.ResponseWriter, r *http.Request) {
		if !stall.Load() {
			w.Write([]byte("LIVE\n"))
			return
		}
		w.Header().Set("Content-Length", "100")
		w.Write([]byte("LI"))
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	start := time.Now()
	_, _, err := a.ServerState(ctx)
	if !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("cancelled mid-answer: %v after %v; want context.Canceled at once", err, time.Since(start))
	}
	stall.Store(false)
	if _, ready, err := a.ServerState(context.Background()); !ready || err != nil {
		t.Fatalf("the next poll: %v %v", ready, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the half-read one must not be reused", n)
	}
}

// A readiness URL's redirect is its answer: not 200, so not ready, and the
// place it points to is never asked.
func TestReadyURLDoesNotFollowRedirects(t *testing.T) {
	var followed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			followed.Store(true)
			return
		}
		http.Redirect(w, r, "/ok", http.StatusFound)
	}))
	defer srv.Close()
	u, err := readyFor(srv.URL + "/healthz/ready")
	if err != nil {
		t.Fatal(err)
	}
	why := u.Check(context.Background())
	if !strings.Contains(why, "answered 302") || followed.Load() {
		t.Fatalf("a 302: %q (followed: %v); want not ready, not followed", why, followed.Load())
	}
}

// A refusal's reason is the start of its body, on one line.
func TestReadyURLReasonIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not\nready "+strings.Repeat("x", 1000), http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	u, err := readyFor(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	why := u.Check(context.Background())
	if !strings.Contains(why, "answered 503: not ready xx") || len(why) > len(srv.URL)+len(" answered 503: ")+maxWhy {
		t.Fatalf("reason %q", why)
	}
}

// Only plain HTTP is spoken: an https URL is refused when the checker is
// made, and said to be.
func TestURLsMustBeHTTP(t *testing.T) {
	if _, err := readyFor("https://127.0.0.1:15020/healthz/ready"); !errors.Is(err, http1.ErrHTTPS) {
		t.Errorf("readiness URL https: %v", err)
	}
	if _, err := adminFor("https://127.0.0.1:15000"); !errors.Is(err, http1.ErrHTTPS) {
		t.Errorf("admin URL https: %v", err)
	}
	a, err := adminFor("http://[::1]")
	if err != nil || a.Port() != 80 || len(a.tcp) != 1 || a.tcp[0] != netip.MustParseAddrPort("[::1]:80") {
		t.Errorf("admin URL without a port: %v", err)
	}
}

// adminFor is NewAdmin of a URL as the flags take it.
func adminFor(raw string) (*Admin, error) {
	u, err := http1.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return NewAdmin(u), nil
}

// readyFor is NewReadyURL of a URL as the flags take it.
func readyFor(raw string) (*ReadyURL, error) {
	u, err := http1.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return NewReadyURL(u), nil
}

// Envoy's /ready body is the not-ready reason, which every /healthz/ready
// and /v1/status answer carries (issue 38, 5: a 4 MB body made each
// /healthz/ready answer 4 MB and status fail). It is cut as
// --extra-ready-url's is, and no more of it is read than maxStateBody: a
// longer answer is an error, short to say, and still an answer (LastAnswer).
func TestServerStateReasonIsBounded(t *testing.T) {
	for _, tt := range []struct {
		name   string
		size   int
		length bool // a Content-Length, else chunked
	}{
		{"a kilobyte", 1000, true},
		{"4 MB", 4_000_000, true},
		{"4 MB chunked", 4_000_000, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := "not\nready " + strings.Repeat("x", tt.size)
			a, _, _ := adminOf(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.length {
					w.Header().Set("Content-Length", fmt.Sprint(len(body)))
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, body)
			})
			state, ready, err := a.ServerState(context.Background())
			switch {
			case ready:
				t.Fatal("ready")
			case tt.size <= maxStateBody && (err != nil || !strings.HasPrefix(state, "not ready xx") || len(state) > maxWhy):
				t.Fatalf("state %d bytes %.40q, err %v; want at most %d bytes, on one line", len(state), state, err, maxWhy)
			case tt.size > maxStateBody && !errors.Is(err, http1.ErrTooLarge):
				t.Fatalf("state %d bytes, err %.100v; want an answer too large", len(state), err)
			}
			tr := NewTracker(a, TrackerConfig{})
			st := tr.poll(context.Background())
			if st.Ready || len(st.Reason) > 2*maxWhy || st.Reason == "" {
				t.Fatalf("the tracker's reason is %d bytes: %.100q", len(st.Reason), st.Reason)
			}
			if tr.LastAnswer().IsZero() {
				t.Errorf("an answer (%.60q) did not count as one for liveness", st.Reason)
			}
		})
	}
}
