package health

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/metrics"
	"github.com/proxy-supervisor/proxy-supervisor/internal/proctest"
)

func TestHealthServer(t *testing.T) {
	ready, why, live := false, "PRE_INITIALIZING", true
	reg := metrics.NewRegistry()
	reg.Gauge("proxy_supervisor_proxy_ready", "x").Set(1)
	s, err := Listen("127.0.0.1:0", func() (bool, string) { return ready, why }, func() (bool, string) { return live, "hung" }, reg)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	base := "http://" + s.Addr().String()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz/ready"); code != 503 || !strings.Contains(body, "PRE_INITIALIZING") {
		t.Fatalf("not ready: %d %q", code, body)
	}
	ready = true
	if code, _ := get("/healthz/ready"); code != 200 {
		t.Fatalf("ready: %d", code)
	}
	if code, _ := get("/healthz/live"); code != 200 {
		t.Fatalf("live: %d", code)
	}
	live = false
	if code, body := get("/healthz/live"); code != 503 || !strings.Contains(body, "not live: hung") {
		t.Fatalf("not live: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "proxy_supervisor_proxy_ready 1") {
		t.Fatalf("metrics: %d %q", code, body)
	}
	for _, path := range []string{"/quitquitquit", "/v1/complete", "/healthz/ready/../../quitquitquit"} {
		resp, err := http.Post(base+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("POST %s: %d; the health server must change nothing", path, resp.StatusCode)
		}
	}
}

// countConns counts the connections s serves and ends; call it before
// Serve.
func countConns(s *Server) (accepted, closed *atomic.Int32) {
	accepted, closed = new(atomic.Int32), new(atomic.Int32)
	s.onOpen = func() { accepted.Add(1) }
	s.onClose = func() { closed.Add(1) }
	return accepted, closed
}

// Slow clients are cut off at the header timeout and cannot pin more than
// maxConns goroutines and descriptors.
func TestSlowClientsDoNotPileUp(t *testing.T) {
	s, err := Listen("127.0.0.1:0", func() (bool, string) { return true, "" }, nil, metrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	accepted, closed := countConns(s)
	go s.Serve()
	defer s.Close()
	before := runtime.NumGoroutine()
	var conns []net.Conn
	for i := 0; i < 300; i++ {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /healthz/ready HTTP/1.1\r\nHost: x\r\n") // never finished
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// The server takes every slot, and no more.
	proctest.Eventually(t, 5*time.Second, "every slot taken", func() bool { return accepted.Load() >= maxConns })
	if g := runtime.NumGoroutine() - before; g > maxConns+10 {
		t.Fatalf("%d goroutines for 300 slow clients; want at most ~%d", g, maxConns)
	}
	// After the header timeout they are gone and a real probe gets through.
	proctest.Eventually(t, headerTimeout+10*time.Second, "the slow clients cut off", func() bool { return closed.Load() >= maxConns })
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + s.Addr().String() + "/healthz/ready")
	if err != nil {
		t.Fatalf("a probe after the slow clients: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("probe: %d", resp.StatusCode)
	}
}

// Keep-alive clients that park on every slot are dropped after the idle
// timeout, so a probe gets through within the kubelet's 3 s.
func TestProbesGetThroughAKeepAliveFlood(t *testing.T) {
	addr := serveReady(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < maxConns+50; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /healthz/live HTTP/1.1\r\nHost: x\r\n\r\n") // then park
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond)
	client := &http.Client{Timeout: 3 * time.Second} // the kubelet's probe timeout
	start := time.Now()
	resp, err := client.Get("http://" + addr + "/healthz/ready")
	if err != nil {
		t.Fatalf("probe during the flood: %v after %v", err, time.Since(start))
	}
	resp.Body.Close()
}
