package health

import (
	"context"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/metrics"
)

// slowHeaders holds n connections from src to addr that trickle header
// bytes and never finish a request, opening a new one whenever the server
// closes one, until ctx ends. It returns when every connection is closed.
func slowHeaders(ctx context.Context, src, addr string, n int) (wait func()) {
	var wg sync.WaitGroup
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	head := []byte("GET /healthz/ready HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					sleepCtx(ctx, 20*time.Millisecond)
					continue
				}
				stop := context.AfterFunc(ctx, func() { c.Close() })
				for i := 0; ctx.Err() == nil; i++ {
					b := []byte{'a'}
					if i < len(head) {
						b = head[i : i+1]
					}
					c.SetWriteDeadline(time.Now().Add(time.Second))
					if _, err := c.Write(b); err != nil {
						break
					}
					sleepCtx(ctx, 100*time.Millisecond)
				}
				stop()
				c.Close()
				sleepCtx(ctx, 20*time.Millisecond) // a bounded test, not a CPU burner
			}
		})
	}
	return wg.Wait
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// One source holding 400 connections that trickle header bytes must not
// starve the kubelet's probes: each probe is a new connection from another
// address with the kubelet's 3 s timeout, and every one is answered.
func TestProbesAnsweredUnderSlowHeaderFlood(t *testing.T) {
	s, err := Listen("127.0.0.1:0", func() (bool, string) { return true, "" }, metrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	addr := s.Addr().String()

	ctx, cancel := context.WithCancel(context.Background())
	wait := slowHeaders(ctx, "127.0.0.2", addr, 400)
	defer func() { cancel(); wait() }()
	// Let the flood take every slot it can, and outlive one header timeout,
	// so that the probes meet it in its steady state.
	time.Sleep(headerTimeout + 500*time.Millisecond)

	const probes = 8
	lat := make([]time.Duration, probes)
	errs := make([]error, probes)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).DialContext,
	}}
	for i := range probes {
		path := []string{"/healthz/ready", "/healthz/live"}[i%2]
		wg.Go(func() {
			start := time.Now()
			resp, err := client.Get("http://" + addr + path)
			lat[i] = time.Since(start)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = &statusError{resp.StatusCode}
				}
			}
			errs[i] = err
		})
		time.Sleep(250 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("probe latencies under the flood: %v (max %v)", lat, slices.Max(lat))
	for i, err := range errs {
		if err != nil {
			t.Errorf("probe %d: %v after %v", i, err, lat[i])
		}
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// Connections from many sources stay within maxConns in all and perSource
// each, and the newest connection is always the one that is served.
func TestFairListenerBounds(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newFairListener(inner, 8, 3)
	defer l.Close()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for src := 1; src <= 4; src++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+src))}}
		for range src + 1 { // 2, 3, 4, 5 connections
			c, err := d.Dial("tcp", inner.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			sc, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 8 {
		t.Errorf("%d connections held, want at most 8", l.n)
	}
	total := 0
	for src, cs := range l.bySrc {
		total += len(cs)
		if len(cs) > 3 {
			t.Errorf("%v holds %d connections, want at most 3", src, len(cs))
		}
	}
	if total != l.n {
		t.Errorf("count %d, but %d connections listed", l.n, total)
	}
	last := held[len(held)-1].LocalAddr().(*net.TCPAddr).AddrPort()
	cs := l.bySrc[last.Addr()]
	if got := cs[len(cs)-1].RemoteAddr().(*net.TCPAddr).AddrPort(); got != last {
		t.Errorf("newest connection %v was evicted", last)
	}
}
