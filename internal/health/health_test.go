package health

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/metrics"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

func TestHealthServer(t *testing.T) {
	ready, why, live := false, "PRE_INITIALIZING", true
	reg := metrics.NewRegistry()
	reg.Gauge("proxy_supervisor_proxy_ready", "x").Set(1)
	s, err := listenOn("127.0.0.1:0", func() (bool, string) { return ready, why }, func() (bool, string) { return live, "hung" }, reg, discard)
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

// accepted is how many connections s has accepted, closed how many of
// them it has ended.
func accepted(s *Server) int {
	n, _ := s.srv.Conns()
	return n
}

func closed(s *Server) int {
	n, open := s.srv.Conns()
	return n - open
}

// Slow clients from one source are cut off: all but perSource at once, as
// newer ones arrive, and the last perSource at the header timeout. They pin
// no more than perSource goroutines.
func TestSlowClientsDoNotPileUp(t *testing.T) {
	s, err := listenOn("127.0.0.1:0", func() (bool, string) { return true, "" }, nil, metrics.NewRegistry(), discard)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	before := runtime.NumGoroutine()
	const n = 300
	var conns []net.Conn
	for i := 0; i < n; i++ {
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
	proctest.Eventually(t, 5*time.Second, "every client accepted", func() bool { return accepted(s) == n })
	if g := runtime.NumGoroutine() - before; g > perSource+10 {
		t.Fatalf("%d goroutines for %d slow clients of one source; want at most ~%d", g, n, perSource)
	}
	// The last perSource are cut only by the header timeout.
	proctest.Eventually(t, headerTimeout+10*time.Second, "every slow client cut off", func() bool { return closed(s) == n })
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

// Keep-alive clients from many sources that park on every slot do not keep
// a probe out: at the cap, a new connection evicts the oldest of the source
// holding the most, so the probe is answered within the kubelet's 3 s.
func TestProbesGetThroughAKeepAliveFlood(t *testing.T) {
	s, err := listenOn("127.0.0.1:0", func() (bool, string) { return true, "" }, nil, metrics.NewRegistry(), discard)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	addr := s.Addr().String()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	flood := maxConns + 50
	for i := 0; i < flood; i++ {
		// perSource a source from 127.0.0.2 on: the global cap, not the
		// per-source one, is what the flood meets.
		from := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(2+i/perSource))}}
		c, err := from.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /healthz/live HTTP/1.1\r\nHost: x\r\n\r\n") // then park
		conns = append(conns, c)
	}
	proctest.Eventually(t, 5*time.Second, "the flood accepted", func() bool { return accepted(s) == flood })
	client := &http.Client{Timeout: 3 * time.Second} // the kubelet's probe timeout
	start := time.Now()
	resp, err := client.Get("http://" + addr + "/healthz/ready")
	if err != nil {
		t.Fatalf("probe during the flood: %v after %v", err, time.Since(start))
	}
	resp.Body.Close()
	if d := time.Since(start); d >= idleTimeout {
		t.Fatalf("probe answered after %v: it waited for an idle timeout, not an eviction", d)
	}
}
