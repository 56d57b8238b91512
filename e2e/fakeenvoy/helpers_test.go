package fakeenvoy

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// start runs a fake on free ports and closes it when the test ends.
func start(t *testing.T, opts Options) *Envoy {
	t.Helper()
	if opts.AdminAddr == "" {
		opts.AdminAddr = "127.0.0.1:0"
	}
	e, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// startLive runs a fake and waits until it is LIVE.
func startLive(t *testing.T, opts Options) *Envoy {
	t.Helper()
	e := start(t, opts)
	select {
	case <-e.Initialized():
	case <-time.After(5 * time.Second):
		t.Fatal("fake never reached LIVE")
	}
	return e
}

type answer struct {
	code   int
	header http.Header
	body   string
	resp   *http.Response
}

// call sends one admin request on a fresh connection.
func call(t *testing.T, e *Envoy, method, target string) answer {
	t.Helper()
	a, err := tryCall(e, method, target, 5*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	return a
}

func tryCall(e *Envoy, method, target string, timeout time.Duration) (answer, error) {
	req, err := http.NewRequest(method, "http://"+e.AdminAddr()+target, nil)
	if err != nil {
		return answer{}, err
	}
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{code: resp.StatusCode, header: resp.Header, body: string(body), resp: resp}, nil
}

// stats reads /stats text into a map.
func stats(t *testing.T, e *Envoy, query string) map[string]uint64 {
	t.Helper()
	a := call(t, e, "GET", "/stats"+query)
	if a.code != 200 {
		t.Fatalf("/stats%s: %d %q", query, a.code, a.body)
	}
	m := make(map[string]uint64)
	for line := range strings.Lines(a.body) {
		name, value, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ": ")
		if !ok {
			t.Fatalf("bad stats line %q", line)
		}
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			t.Fatalf("bad stats line %q: %v", line, err)
		}
		m[name] = v
	}
	return m
}

// eventually polls cond until it holds or the generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	proctest.Eventually(t, 5*time.Second, what, cond)
}

// httpConn is a raw keep-alive HTTP/1.1 client connection to a data listener.
type httpConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialHTTP(t *testing.T, addr string) *httpConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &httpConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// get sends one request and reports whether the answer asked to close the connection.
func (c *httpConn) get() (closing bool) {
	c.t.Helper()
	c.nc.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c.nc, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		c.t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.Close
}

// closedByPeer reports whether the server closed the connection within d.
func (c *httpConn) closedByPeer(d time.Duration) bool {
	c.nc.SetReadDeadline(time.Now().Add(d))
	_, err := c.br.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

func refused(addr string) bool {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return strings.Contains(err.Error(), "connection refused")
	}
	nc.Close()
	return false
}

// logBuffer collects what the fake logs.
type logBuffer struct{ proctest.Buffer }

func (l *logBuffer) logger() *slog.Logger { return slog.New(NewLogHandler(l, slog.LevelDebug)) }
