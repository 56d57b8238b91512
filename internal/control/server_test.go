package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// backend is a Backend whose answers the test controls.
type backend struct {
	mu       sync.Mutex
	waits    atomic.Int32 // calls of WaitReady so far
	ended    atomic.Int32 // calls of WaitReady ended by their context
	ready    chan struct{}
	drained  chan struct{}
	complete []string
	// onComplete, when set, runs after a completion is recorded, as the
	// end of the job does in the supervisor.
	onComplete func()
}

func newBackend() *backend {
	return &backend{ready: make(chan struct{}), drained: make(chan struct{})}
}

func (b *backend) WaitReady(ctx context.Context) (bool, string) {
	b.waits.Add(1)
	select {
	case <-b.ready:
		return true, ""
	case <-ctx.Done():
		b.ended.Add(1)
		return false, "PRE_INITIALIZING"
	}
}

func (b *backend) Complete(_ context.Context, c Completion) error {
	if c.Peer == "unknown" {
		return errors.New(`peer "unknown" is not in --peers`)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	done := fmt.Sprintf("%s=%d/%s", c.Peer, c.Code, c.Reason)
	if c.StopSignal != "" {
		done += fmt.Sprintf("/%s@%s", c.StopSignal, c.StoppedAt.UTC().Format(time.RFC3339Nano))
	}
	b.complete = append(b.complete, done)
	if b.onComplete != nil {
		b.onComplete()
	}
	return nil
}

func (b *backend) Drain(ctx context.Context) (bool, string) {
	select {
	case <-b.drained:
		return true, ""
	case <-ctx.Done():
		return false, "timeout"
	}
}

func (b *backend) Status() Status { return Status{State: "ready"} }

func serve(t *testing.T, b Backend, allowed []uint32) (*Server, *Client) {
	t.Helper()
	return serveIn(t, t.TempDir(), b, allowed)
}

// serveIn serves b with dir as the control dir.
func serveIn(t *testing.T, dir string, b Backend, allowed []uint32) (*Server, *Client) {
	t.Helper()
	s, err := listenIn(dir, b, allowed, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	return s, NewClient(dir)
}

func TestSocketModeIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	s, _ := serve(t, newBackend(), nil)
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket mode %v, want 0666", fi.Mode().Perm())
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	dir := t.TempDir()
	path := SocketPath(dir)
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// A socket file left by an earlier run: bound, then abandoned.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	s, err := listenIn(dir, newBackend(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	defer s.Close()
	// A live one is not stolen.
	go s.Serve()
	if _, err := listenIn(dir, newBackend(), nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "another supervisor") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
}

func TestNotASocketIsKept(t *testing.T) {
	dir := t.TempDir()
	path := SocketPath(dir)
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := listenIn(dir, newBackend(), nil, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
}

func TestReadyLongPoll(t *testing.T) {
	b := newBackend()
	_, c := serve(t, b, nil)
	ctx := context.Background()
	start := time.Now()
	ok, why, err := c.Ready(ctx, 100*time.Millisecond)
	if err != nil || ok || why != "PRE_INITIALIZING" {
		t.Fatalf("not ready yet: got %v %q %v", ok, why, err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("answered after %v, before the wait ended", d)
	}
	type result struct {
		ok  bool
		err error
	}
	res := make(chan result, 1)
	go func() {
		ok, _, err := c.Ready(ctx, 10*time.Second)
		res <- result{ok, err}
	}()
	proctest.Eventually(t, 5*time.Second, "the second long poll waiting", func() bool { return b.waits.Load() == 2 })
	start = time.Now()
	close(b.ready)
	if r := <-res; r.err != nil || !r.ok {
		t.Fatalf("ready: %v %v", r.ok, r.err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("long poll took %v after readiness; it must answer when ready", d)
	}
}

// raw sends a raw request and returns the status line and body.
func raw(t *testing.T, s *Server, req string) (string, string) {
	t.Helper()
	c, err := net.Dial("unix", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return "", err.Error()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.Status, string(body)
}

func TestCompleteValidation(t *testing.T) {
	b := newBackend()
	s, _ := serve(t, b, nil)
	tests := []struct {
		req    string
		status string
		body   string
	}{
		{"POST /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\n\r\n", "202 Accepted", `"peer":"app"`},
		{"POST /v1/complete?exit_code=3&peer=job&reason=signaled HTTP/1.1\r\nHost: x\r\n\r\n", "202 Accepted", `"exit_code":3`},
		{"POST /v1/complete HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `"error":"exit_code is required"`},
		{"POST /v1/complete?exit_code=abc HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `want an integer from 0 to 255`},
		{"POST /v1/complete?exit_code=256 HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `want an integer from 0 to 255`},
		{"POST /v1/complete?exit_code=-1 HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `want an integer from 0 to 255`},
		{"POST /v1/complete?exit_code=0&peer=unknown HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `not in --peers`},
		{"POST /v1/complete?exit_code=0&exitcode=1 HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `unknown parameter \"exitcode\"`},
		{"POST /v1/complete?exit_code=%zz HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `{"error":"invalid URL escape \"%zz\""}`},
		{"POST /v1/complete?exit_code=0;peer=job HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `{"error":"invalid semicolon separator in query"}`},
		{"POST /v1/%63omplete?exit_code=4&peer=jo%62&reason=a+b%2Bc HTTP/1.1\r\nHost: x\r\n\r\n", "202 Accepted", `"peer":"job"`},
		{"POST /v1/complete?exit_code=143&peer=job&reason=signaled&stop_signal=SIGTERM&stopped_at=2026-11-26T10:00:00.5Z HTTP/1.1\r\nHost: x\r\n\r\n", "202 Accepted", `"exit_code":143`},
		{"POST /v1/complete?exit_code=143&stop_signal=SIGTERM&stopped_at=yesterday HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `stopped_at \"yesterday\": want an RFC 3339 time`},
		{"GET /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\n\r\n", "405 Method Not Allowed", `needs POST`},
		{"POST /v1/ready HTTP/1.1\r\nHost: x\r\n\r\n", "405 Method Not Allowed", `needs GET`},
		{"GET /v1/ready?wait=forever HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request", `want a duration`},
		{"GET /quitquitquit HTTP/1.1\r\nHost: x\r\n\r\n", "404 Not Found", `no such endpoint`},
		{"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n", "200 OK", `"state":"ready"`},
		{"POST /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 100000), "400 Bad Request", `take no body`},
		{"POST /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n", "400 Bad Request", `take no body`},
	}
	for _, tt := range tests {
		status, body := raw(t, s, tt.req)
		if status != tt.status || !strings.Contains(body, tt.body) {
			t.Errorf("%q:\n got %s %s\nwant %s ...%s...", firstLine(tt.req), status, body, tt.status, tt.body)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.complete) != 4 || b.complete[1] != "job=3/signaled" || b.complete[2] != "job=4/a b+c" ||
		b.complete[3] != "job=143/signaled/SIGTERM@2026-11-26T10:00:00.5Z" {
		t.Fatalf("recorded %v", b.complete)
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\r\n"); return l }

// Junk never harms the server: after each, it still answers.
func TestJunkOnTheSocket(t *testing.T) {
	s, c := serve(t, newBackend(), nil)
	junk := []string{
		"\x00\x01\x02\xff\xfe garbage\r\n\r\n",
		"GET / HTTP/9.9\r\n\r\n",
		"POST /v1/complete?exit_code=0 HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 64) + "\r\n",
		"GET /v1/status HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzzz\r\n",
		"half a request",
		"",
	}
	for _, j := range junk {
		conn, err := net.Dial("unix", s.Path())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, j)
		conn.(*net.UnixConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, conn)
		conn.Close()
		if _, err := c.Status(context.Background()); err != nil {
			t.Fatalf("after %q the server no longer answers: %v", j, err)
		}
	}
}

func TestAllowedUIDs(t *testing.T) {
	_, c := serve(t, newBackend(), []uint32{uint32(os.Getuid()) + 1})
	_, err := c.Status(context.Background())
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != http.StatusForbidden || !strings.Contains(ae.Msg, "--allowed-uids") {
		t.Fatalf("a uid outside the list got %v", err)
	}
	_, c = serve(t, newBackend(), []uint32{uint32(os.Getuid())})
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("an allowed uid was refused: %v", err)
	}
}

func TestDrainWait(t *testing.T) {
	b := newBackend()
	_, c := serve(t, b, nil)
	ok, why, err := c.Drain(context.Background(), 50*time.Millisecond)
	if err != nil || ok || why != "timeout" {
		t.Fatalf("drain before its end: %v %q %v", ok, why, err)
	}
	close(b.drained)
	if ok, _, err := c.Drain(context.Background(), time.Second); err != nil || !ok {
		t.Fatalf("drained: %v %v", ok, err)
	}
}

func TestUnavailable(t *testing.T) {
	c := NewClient(t.TempDir())
	_, err := c.Status(context.Background())
	if !Unavailable(err) {
		t.Fatalf("no socket: %v is not Unavailable", err)
	}
}

func FuzzRequest(f *testing.F) {
	f.Add("POST /v1/complete?exit_code=0&peer=job HTTP/1.1\r\nHost: x\r\n\r\n")
	f.Add("GET /v1/ready?wait=1ms HTTP/1.1\r\nHost: x\r\n\r\n")
	f.Add("POST /v1/drain?wait=1ms HTTP/1.1\r\nHost: x\r\n\r\n")
	f.Add("GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
	b := newBackend()
	close(b.ready)
	close(b.drained)
	h := &handler{b: b, log: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, req string) {
		end := http1.HeadEnd([]byte(req))
		if end < 0 {
			return
		}
		r, ok := http1.ParseRequest([]byte(req[:end]))
		if !ok {
			return // the server answers 400 itself before any handler
		}
		a := h.handle(context.Background(), &r)
		body, err := json.Marshal(a.body)
		if err != nil {
			t.Fatalf("%d with a body that is not JSON: %v", a.code, err)
		}
		if a.code >= 400 && a.code < 500 && !strings.Contains(string(body), `"error"`) {
			t.Fatalf("%d without a JSON error: %q", a.code, body)
		}
		if a.code >= 500 && a.code != http.StatusGatewayTimeout && a.code != http.StatusServiceUnavailable {
			t.Fatalf("server error %d for %q", a.code, req)
		}
	})
}

// listenIn builds the server of the socket in dir and binds it.
func listenIn(dir string, b Backend, allowed []uint32, log *slog.Logger) (*Server, error) {
	s := New(dir, b, allowed, log)
	if err := s.Listen(); err != nil {
		return nil, err
	}
	return s, nil
}
