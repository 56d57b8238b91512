package http1

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// serveConfig serves cfg on loopback until the test ends, and returns the
// server and its address.
func serveConfig(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ln, cfg)
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String()
}

func testConfig(h Handler, log *slog.Logger) Config {
	return Config{Name: "test server", Handler: h, MaxHead: 1 << 10, HeadTimeout: 5 * time.Second,
		IdleTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, Grace: time.Second, Log: log}
}

// A Handler that panics ends its connection, and is logged; the process
// and the server go on. Without the recovery the test binary dies.
func TestAPanicEndsItsConnectionAlone(t *testing.T) {
	logged := new(proctest.Buffer)
	log := slog.New(slog.NewTextHandler(logged, nil))
	_, addr := serveConfig(t, testConfig(func(_ context.Context, r *Request, body []byte) Answer {
		if string(r.Path) == "/panic" {
			panic("a bug")
		}
		return Answer{Code: 200, Body: append(body, "ok\n"...)}
	}, log))
	get := func(path string) (*http.Response, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		return http.ReadResponse(bufio.NewReader(c), nil)
	}
	if resp, err := get("/panic"); err == nil {
		t.Fatalf("a panicking handler answered %s", resp.Status)
	}
	if resp, err := get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a panic: %v %v", resp, err)
	}
	if out := logged.String(); !strings.Contains(out, "test server: panic serving a request") || !strings.Contains(out, "a bug") {
		t.Fatalf("log %q: want the panic", out)
	}
}

// Close delivers the answer being written, ends its request's context,
// closes an idle connection at once, and returns without waiting out its
// grace.
func TestCloseDeliversWhatIsInFlight(t *testing.T) {
	in, out := make(chan struct{}), make(chan struct{})
	cfg := testConfig(func(ctx context.Context, r *Request, body []byte) Answer {
		if string(r.Path) == "/slow" {
			close(in)
			<-ctx.Done() // Close ends it
			<-out
		}
		return Answer{Code: 200, Body: append(body, "ok\n"...)}
	}, slog.New(slog.DiscardHandler))
	s, addr := serveConfig(t, cfg)
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busy.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-in:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request never reached its handler")
	}
	closed := make(chan time.Duration)
	go func() {
		start := time.Now()
		s.Close()
		closed <- time.Since(start)
	}()
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("idle connection at Close: read %d, %v; want it closed", n, err)
	}
	close(out)
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil || resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("the answer in flight at Close: %v %v; want 200 with Connection: close", resp, err)
	}
	select {
	case d := <-closed:
		if d >= cfg.Grace {
			t.Errorf("Close took %v, its whole grace", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close has not returned after 10s")
	}
	if served, open := s.Conns(); served != 2 || open != 0 {
		t.Errorf("Conns: %d served, %d open; want 2 and 0", served, open)
	}
}

// answerConn records what the server tells it of its answers.
type answerConn struct {
	net.Conn
	told chan bool
}

func (c *answerConn) Answering(b bool) { c.told <- b }

type answerListener struct {
	net.Listener
	told chan bool
}

func (l answerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &answerConn{Conn: c, told: l.told}, nil
}

// A connection that is an Answerer is told that its request is answered
// before its Handler runs, and that the answer is written once it is:
// health's cap keeps it in between.
func TestAnswererToldAroundItsAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan bool, 4)
	s := NewServer(answerListener{ln, told}, testConfig(func(_ context.Context, _ *Request, body []byte) Answer {
		select {
		case b := <-told:
			if !b {
				t.Error("the Handler ran after the connection was told its answer was written")
			}
		default:
			t.Error("the Handler ran before the connection was told it was being answered")
		}
		return Answer{Code: 200, Body: append(body, "ok\n"...)}
	}, slog.New(slog.DiscardHandler)))
	go s.Serve()
	defer s.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("answer: %v %v", resp, err)
	}
	select {
	case b := <-told:
		if b {
			t.Fatal("told it was being answered again, want written")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not told that the answer was written within 10 s")
	}
}
