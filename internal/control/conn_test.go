package control

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// serveTuned serves b after tune has changed the connections' bounds.
func serveTuned(t *testing.T, b Backend, tune func(*http1.Config)) *Server {
	t.Helper()
	s := New(t.TempDir(), b, nil, slog.New(slog.DiscardHandler))
	s.tune = tune
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	return s
}

// dial connects to s, with a deadline that only a hung test meets.
func dial(t *testing.T, s *Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// ask sends req on c and reads its answer.
func ask(t *testing.T, c net.Conn, br *bufio.Reader, req string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("%s: %v", firstLine(req), err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", firstLine(req), err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: body: %v", firstLine(req), err)
	}
	return resp, string(body)
}

// closedWithin fails unless the server closes c within d: a read then
// ends without data.
func closedWithin(t *testing.T, br *bufio.Reader, d time.Duration) {
	t.Helper()
	start := time.Now()
	n, err := br.Read(make([]byte, 1))
	if n > 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %v: read %d bytes, %v", time.Since(start), n, err)
	}
	if e := time.Since(start); e > d {
		t.Fatalf("connection closed after %v, want within %v", e, d)
	}
}

// Clients ask for readiness and then report completion on one connection.
func TestKeepAlive(t *testing.T) {
	b := newBackend()
	close(b.ready)
	s := serveTuned(t, b, nil)
	c, br := dial(t, s)
	resp, body := ask(t, c, br, "GET /v1/ready?wait=1s HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || resp.Close || resp.Header.Get("Content-Type") != "application/json" || body != "{\"ready\":true}\n" {
		t.Fatalf("ready: %s close=%v %q %q", resp.Status, resp.Close, resp.Header.Get("Content-Type"), body)
	}
	resp, body = ask(t, c, br, "POST /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 202 || !strings.Contains(body, `"recorded":true`) {
		t.Fatalf("complete on the same connection: %s %s", resp.Status, body)
	}
	// A client that asks to close, or speaks HTTP/1.0, has the connection
	// closed after its answer.
	for _, req := range []string{
		"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"GET /v1/status HTTP/1.0\r\n\r\n",
	} {
		c, br := dial(t, s)
		if resp, _ := ask(t, c, br, req); resp.StatusCode != 200 || !resp.Close {
			t.Fatalf("%q: %s close=%v", req, resp.Status, resp.Close)
		}
		closedWithin(t, br, 5*time.Second)
	}
}

// A client that sends nothing, trickles its head or idles between requests
// is cut within its bound.
func TestHeadAndIdleTimeouts(t *testing.T) {
	const bound = 300 * time.Millisecond
	s := serveTuned(t, newBackend(), func(c *http1.Config) { c.HeadTimeout, c.IdleTimeout = bound, bound })
	t.Run("silent", func(t *testing.T) {
		_, br := dial(t, s)
		closedWithin(t, br, bound+5*time.Second)
	})
	t.Run("trickle", func(t *testing.T) {
		c, br := dial(t, s)
		// One byte every 50ms would take 5s for the head; the server must
		// cut it long before.
		go func() {
			for _, ch := range []byte("GET /v1/status HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n\r\n") {
				if _, err := c.Write([]byte{ch}); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		start := time.Now()
		closedWithin(t, br, 4*time.Second)
		if e := time.Since(start); e < bound/2 {
			t.Fatalf("cut after %v, before its bound %v", e, bound)
		}
	})
	t.Run("idle", func(t *testing.T) {
		c, br := dial(t, s)
		if resp, _ := ask(t, c, br, "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("status: %s", resp.Status)
		}
		closedWithin(t, br, bound+5*time.Second)
	})
	// The head of a request after the first has headTimeout from its
	// first byte, however long the idle wait before it may be.
	t.Run("after idle", func(t *testing.T) {
		s := serveTuned(t, newBackend(), func(c *http1.Config) { c.HeadTimeout = bound })
		c, br := dial(t, s)
		if resp, _ := ask(t, c, br, "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("status: %s", resp.Status)
		}
		io.WriteString(c, "GET /v1/sta")
		closedWithin(t, br, bound+5*time.Second)
	})
}

// The head is bounded in size, and a head the server cannot read ends the
// connection after its 4xx: what follows cannot be trusted to be a request.
func TestBadHeadsEndTheConnection(t *testing.T) {
	s := serveTuned(t, newBackend(), nil)
	for _, tt := range []struct {
		req    string
		status int
		body   string
		keep   bool // the connection stays open
	}{
		{"GET /v1/status HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", maxHeader) + "\r\n\r\n", 431, "larger than 8192 bytes", false},
		{"GET /v1/status HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", maxHeader), 431, "larger than 8192 bytes", false},
		{"GET /v1/status HTTP/2.0\r\n\r\n", 400, "malformed request head", false},
		{"GET v1/status HTTP/1.1\r\n\r\n", 400, "malformed request head", false},
		{"GET /v1/status HTTP/1.1\r\n folded\r\n\r\n", 400, "malformed request head", false},
		{"POST /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 400, "take no body", false},
		{"GET /v1/status HTTP/1.1\r\n\r\n", 400, "malformed request head", false}, // HTTP/1.1 without Host
		{"GET /v1/%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed request head", false},
	} {
		c, br := dial(t, s)
		resp, body := ask(t, c, br, tt.req)
		if resp.StatusCode != tt.status || !strings.Contains(body, `"error":`) || !strings.Contains(body, tt.body) {
			t.Errorf("%.40q: got %s %s, want %d ...%s...", tt.req, resp.Status, body, tt.status, tt.body)
			continue
		}
		if !tt.keep {
			closedWithin(t, br, 5*time.Second)
		}
	}
}

// A request with a body ends its connection whatever it is answered, a
// refused uid's 403 too: the body would be read as the next request.
func TestABodyEndsTheConnectionOfARefusedUID(t *testing.T) {
	s, _ := serveIn(t, t.TempDir(), newBackend(), []uint32{54321})
	c, br := dial(t, s)
	resp, body := ask(t, c, br, "POST /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\nGET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Fatalf("got %s %s, want 403", resp.Status, body)
	}
	closedWithin(t, br, 5*time.Second)
}

// A long poll whose client gives up ends at once: its context ends when the
// connection does, and nothing of it is left.
func TestClientGoneEndsTheLongPoll(t *testing.T) {
	b := newBackend()
	s := serveTuned(t, b, nil)
	base := runtime.NumGoroutine()
	c, _ := dial(t, s)
	io.WriteString(c, "GET /v1/ready?wait=1m HTTP/1.1\r\nHost: x\r\n\r\n")
	proctest.Eventually(t, 5*time.Second, "the long poll waiting", func() bool { return b.waits.Load() == 1 })
	c.Close()
	proctest.Eventually(t, 5*time.Second, "the long poll's context ended", func() bool { return b.ended.Load() == 1 })
	proctest.Eventually(t, 5*time.Second, "the connection forgotten", func() bool { return openConns(s) == 0 })
	proctest.Eventually(t, 5*time.Second, "its goroutines gone", func() bool { return runtime.NumGoroutine() <= base })
}

func openConns(s *Server) int {
	_, open := s.srv.Conns()
	return open
}

// Close answers the long polls, delivers the answer of the request that
// ended the job, closes connections between requests at once, and removes
// the socket.
func TestClose(t *testing.T) {
	b := newBackend()
	s := serveTuned(t, b, nil)
	poll, pollr := dial(t, s)
	io.WriteString(poll, "GET /v1/ready?wait=1m HTTP/1.1\r\nHost: x\r\n\r\n")
	idle, idler := dial(t, s)
	ask(t, idle, idler, "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
	proctest.Eventually(t, 5*time.Second, "the long poll waiting", func() bool { return b.waits.Load() == 1 })

	closed := make(chan time.Duration, 1)
	b.onComplete = func() {
		go func() {
			start := time.Now()
			s.Close()
			closed <- time.Since(start)
		}()
		// The job's end races ahead of the answer: Close has ended the
		// long poll and the idle connection before the 202 is written.
		if !proctest.Until(5*time.Second, func() bool { return openConns(s) <= 1 }) {
			t.Error("Close did not end the long poll and the idle connection within 5s")
		}
	}
	done, doner := dial(t, s)
	resp, body := ask(t, done, doner, "POST /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 202 {
		t.Fatalf("the completion that ends the job: %s %s", resp.Status, body)
	}
	resp, err := http.ReadResponse(pollr, nil)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("the long poll at Close: %v %v", resp, err)
	}
	// A client must not keep a connection that the closing server ends.
	if !resp.Close {
		t.Errorf("the long poll's answer at Close lacks Connection: close")
	}
	closedWithin(t, idler, 5*time.Second)
	var d time.Duration
	select {
	case d = <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if d >= closeGrace {
		t.Errorf("Close took %v: it waited out its grace for connections with nothing to write", d)
	}
	if _, err := os.Lstat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Serve(); err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
}

// A server that never served still releases its socket.
func TestCloseWithoutServe(t *testing.T) {
	s, err := listenIn(t.TempDir(), newBackend(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
}

// A handler that will not end is cut after closeGrace.
func TestCloseCutsWhatIsLeft(t *testing.T) {
	b := &stuck{backend: newBackend(), in: make(chan struct{}), out: make(chan struct{})}
	defer close(b.out)
	s := serveTuned(t, b, nil)
	c, br := dial(t, s)
	io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-b.in:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the backend")
	}
	start := time.Now()
	s.Close()
	if d := time.Since(start); d < closeGrace || d > closeGrace+5*time.Second {
		t.Errorf("Close took %v, want its grace %v", d, closeGrace)
	}
	closedWithin(t, br, 5*time.Second)
}

// stuck is a backend whose Status blocks until out is closed.
type stuck struct {
	*backend
	in, out chan struct{}
}

func (b *stuck) Status() Status {
	close(b.in)
	<-b.out
	return Status{}
}

// A flood of connections that send junk, half a request or nothing, and
// go, leaves nothing behind.
func TestFloodLeavesNothing(t *testing.T) {
	s := serveTuned(t, newBackend(), nil)
	c, br := dial(t, s)
	ask(t, c, br, "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
	base := runtime.NumGoroutine()
	junk := []string{"", "GET /v1/sta", "\x00\xff\r\n\r\n", "GET /v1/ready?wait=1m HTTP/1.1\r\nHost: x\r\n\r\n", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"}
	for i := range 300 {
		c, err := net.Dial("unix", s.Path())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, junk[i%len(junk)])
		c.Close()
	}
	proctest.Eventually(t, 10*time.Second, "every connection forgotten", func() bool { return openConns(s) == 1 })
	proctest.Eventually(t, 10*time.Second, "their goroutines gone", func() bool { return runtime.NumGoroutine() <= base })
	if resp, _ := ask(t, c, br, "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("after the flood: %s", resp.Status)
	}
}

// An answer to HEAD has the head a GET would get and no body, so the
// connection carries the next request.
func TestHeadGetsTheHeadAlone(t *testing.T) {
	s := serveTuned(t, newBackend(), nil)
	c, br := dial(t, s)
	io.WriteString(c, "HEAD /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 405 || resp.Close || resp.ContentLength <= 0 || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("HEAD: %s, close %v, length %d, Allow %q; want 405 with a GET's length, kept", resp.Status, resp.Close, resp.ContentLength, resp.Header.Get("Allow"))
	}
	if resp, body := ask(t, c, br, "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 || !strings.Contains(body, "ready") {
		t.Fatalf("GET after HEAD: %s %q", resp.Status, body)
	}
}
