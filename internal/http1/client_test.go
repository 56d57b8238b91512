package http1

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a scripted HTTP/1.1 server: answer writes the raw answer to
// each request head it reads, and says whether to keep the connection.
type server struct {
	addr     string
	conns    atomic.Int32
	mu       sync.Mutex
	requests []string // each request's head
}

func serve(t *testing.T, answer func(n int, head string) (raw string, keep bool)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var head strings.Builder
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						head.WriteString(line)
						if line == "\r\n" {
							break
						}
					}
					s.mu.Lock()
					s.requests = append(s.requests, head.String())
					n := len(s.requests)
					s.mu.Unlock()
					raw, keep := answer(n, head.String())
					if raw != "" {
						c.Write([]byte(raw))
					}
					if !keep {
						return
					}
				}
			})
		}
	})
	return s
}

func (s *server) client(max int) *Client {
	return &Client{Dial: URL{Network: "tcp", Addr: s.addr}.Dial(time.Second), Host: s.addr, MaxBody: max}
}

func (s *server) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

func do(t *testing.T, c *Client, method, target string) Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Do(ctx, method, target)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	return resp
}

func TestKeepsTheConnectionAcrossRequests(t *testing.T) {
	s := serve(t, func(int, string) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nLIVE\n", true
	})
	c := s.client(1 << 10)
	defer c.CloseIdle()
	for range 50 {
		if r := do(t, c, "GET", "/ready"); r.Code != 200 || string(r.Body) != "LIVE\n" || r.Status != "OK" {
			t.Fatalf("answer %+v", r)
		}
	}
	if n := s.conns.Load(); n != 1 {
		t.Fatalf("50 requests took %d connections, want 1", n)
	}
}

func TestSendsAHeadWithoutBody(t *testing.T) {
	s := serve(t, func(int, string) (string, bool) { return "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", true })
	c := s.client(1 << 10)
	defer c.CloseIdle()
	do(t, c, "POST", "/v1/complete?exit_code=0&peer=app")
	head := s.seen()[0]
	for _, want := range []string{"POST /v1/complete?exit_code=0&peer=app HTTP/1.1\r\n", "\r\nHost: " + s.addr + "\r\n", "\r\nContent-Length: 0\r\n"} {
		if !strings.Contains(head, want) {
			t.Fatalf("request head %q lacks %q", head, want)
		}
	}
}

func TestReadsEveryFraming(t *testing.T) {
	for _, tc := range []struct {
		name, raw, body string
		code            int
		kept            bool
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", "abc", 200, true},
		{"chunked with extension and trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\na\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n", "abc0123456789", 200, true},
		{"until close", "HTTP/1.0 503 Service Unavailable\r\n\r\nnot ready", "not ready", 503, false},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "ok", 200, false},
		{"interim answer skipped", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", "", 204, true},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", "ok", 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, keep, err := ReadResponse(bufio.NewReader(strings.NewReader(tc.raw)), 64)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Code != tc.code || string(resp.Body) != tc.body || keep != tc.kept {
				t.Fatalf("got %d %q keep=%v, want %d %q keep=%v", resp.Code, resp.Body, keep, tc.code, tc.body, tc.kept)
			}
		})
	}
}

// An answer longer than the bound is an error in every framing, never a
// cut-off body that reads as a short answer.
func TestRefusesAnAnswerOverTheBound(t *testing.T) {
	long := strings.Repeat("x", 65)
	for name, raw := range map[string]string{
		"content-length": "HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n" + long,
		"chunked":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + long[:64] + "\r\n1\r\nx\r\n0\r\n\r\n",
		"until close":    "HTTP/1.0 200 OK\r\n\r\n" + long,
	} {
		_, _, err := ReadResponse(bufio.NewReader(strings.NewReader(raw)), 64)
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: err %v, want ErrTooLarge", name, err)
		}
	}
}

func TestRefusesMalformedAnswers(t *testing.T) {
	for _, raw := range []string{
		"HTTP/1.1 -12 OK\r\n\r\n",
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
	} {
		if resp, _, err := ReadResponse(bufio.NewReader(strings.NewReader(raw)), 64); err == nil {
			t.Errorf("%q read as %+v", raw, resp)
		}
	}
}

// A server may close a kept connection while it is idle; the request that
// finds it closed goes again, once, on a new connection.
func TestSendsAgainWhenAKeptConnectionWasClosed(t *testing.T) {
	s := serve(t, func(int, string) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false // closes without saying so
	})
	c := s.client(64)
	defer c.CloseIdle()
	for range 3 {
		if r := do(t, c, "POST", "/quitquitquit"); string(r.Body) != "ok" {
			t.Fatalf("answer %+v", r)
		}
	}
	if n := len(s.seen()); n != 3 {
		t.Fatalf("server saw %d requests, want 3", n)
	}
}

// Once part of an answer arrived, the request is not sent again: the
// server acted on it.
func TestDoesNotSendAgainAfterPartOfTheAnswer(t *testing.T) {
	s := serve(t, func(n int, _ string) (string, bool) {
		if n == 1 {
			return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true
		}
		return "HTTP/1.1 200 OK\r\nContent-Le", false
	})
	c := s.client(64)
	defer c.CloseIdle()
	do(t, c, "GET", "/a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Do(ctx, "GET", "/b"); err == nil {
		t.Fatal("a cut-off answer read as an answer")
	}
	if n := len(s.seen()); n != 2 {
		t.Fatalf("server saw %d requests, want 2 (no resend)", n)
	}
}

func TestCancelEndsAWaitForTheAnswer(t *testing.T) {
	s := serve(t, func(int, string) (string, bool) { return "", true }) // never answers
	c := s.client(64)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Do(ctx, "GET", "/v1/ready?wait=1m")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Do(ctx, "GET", "/"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want context.DeadlineExceeded", err)
	}
}

func TestDialErrorsKeepTheirCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := &Client{Dial: URL{Network: "tcp", Addr: addr}.Dial(time.Second), Host: addr, MaxBody: 64}
	_, err = c.Do(context.Background(), "GET", "/")
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("err %v, want the dial's *net.OpError", err)
	}
}

func TestParseURL(t *testing.T) {
	for raw, want := range map[string]URL{
		"http://127.0.0.1:15020/healthz/ready":  {"tcp", "127.0.0.1:15020", "127.0.0.1:15020", "/healthz/ready", ""},
		"http://localhost":                      {"tcp", "localhost:80", "localhost", "/", ""},
		"http://[::1]:15000/stats?filter=x%20y": {"tcp", "[::1]:15000", "[::1]:15000", "/stats?filter=x%20y", ""},
		"unix:///var/run/envoy/admin.sock":      {"unix", "/var/run/envoy/admin.sock", "localhost", "/", ""},
	} {
		got, err := ParseURL(raw)
		want.Raw = raw
		if err != nil || got != want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"https://127.0.0.1:15020/", "127.0.0.1:15000", "http://", "http://u:p@host/", "ftp://x/",
		"unix://host/admin.sock", "unix:admin.sock", "unix:///admin.sock?x"} {
		if _, err := ParseURL(raw); err == nil {
			t.Errorf("ParseURL(%q) took it", raw)
		}
	}
}

// Bytes past an answer answer nothing this client asked: the connection
// that carried them is not kept.
func TestDoesNotKeepAConnectionWithBytesPastTheAnswer(t *testing.T) {
	s := serve(t, func(int, string) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Smuggled\r\nContent-Length: 0\r\n\r\n", true
	})
	c := s.client(64)
	defer c.CloseIdle()
	for range 2 {
		if r := do(t, c, "GET", "/ready"); r.Code != 200 {
			t.Fatalf("answer %+v", r)
		}
	}
	if n := s.conns.Load(); n != 2 {
		t.Fatalf("2 requests took %d connections, want 2", n)
	}
}

func TestBoundsInterimAnswersAndTrailers(t *testing.T) {
	for name, raw := range map[string]string{
		"interim": strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", maxInterim+1) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"trailer": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + strings.Repeat("X-T: "+strings.Repeat("t", 1000)+"\r\n", 70) + "\r\n",
	} {
		if _, _, err := ReadResponse(bufio.NewReaderSize(strings.NewReader(raw), 4<<10), 64); err == nil {
			t.Errorf("%s: no bound", name)
		}
	}
}

// What net/http's client refuses, ReadResponse refuses: each of these was
// read once.
func TestReadResponseRefusesWhatNetHTTPRefuses(t *testing.T) {
	for _, in := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent (Length): 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\n\r\n",
	} {
		if resp, _, err := ReadResponse(bufio.NewReader(strings.NewReader(in)), 64); err == nil {
			t.Errorf("%q read as %d %q", in, resp.Code, resp.Body)
		}
	}
	// Connection: close anywhere ends the connection.
	in := "HTTP/1.1 200 OK\r\nConnection: close\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
	if _, keep, err := ReadResponse(bufio.NewReader(strings.NewReader(in)), 64); err != nil || keep {
		t.Errorf("%q: keep %v, %v; want the connection closed", in, keep, err)
	}
}
