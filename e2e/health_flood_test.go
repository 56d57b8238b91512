package e2e

import (
	"context"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// One source in the pod's network holding 400 connections to the health
// port that trickle header bytes (the port is outside Istio's capture, so
// anything that reaches the pod's IP can) must not starve the kubelet's
// probes: each a new connection from another address with a 3 s timeout.
func TestHealthProbesUnderSlowHeaderFlood(t *testing.T) {
	p := newPod(t)
	p.supervise(nil)
	p.waitHTTP(readyURL, 200, 10*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	var flood sync.WaitGroup
	defer func() { cancel(); flood.Wait() }()
	from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: time.Second}
	head := []byte("GET /healthz/ready HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	for range 400 {
		flood.Go(func() {
			for ctx.Err() == nil {
				var c net.Conn
				if p.inNetns(func() (err error) { c, err = from.DialContext(ctx, "tcp", "127.0.0.1:15022"); return err }) != nil {
					pause(ctx, 20*time.Millisecond)
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
					pause(ctx, 100*time.Millisecond)
				}
				stop()
				c.Close()
				pause(ctx, 20*time.Millisecond) // bounded load, not a CPU burner
			}
		})
	}
	time.Sleep(2500 * time.Millisecond) // past one header timeout: the flood's steady state

	probe := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: p.dial, DisableKeepAlives: true}}
	const probes = 8
	lat := make([]time.Duration, probes)
	errs := make([]error, probes)
	var wg sync.WaitGroup
	for i := range probes {
		url := []string{readyURL, "http://127.0.0.1:15022/healthz/live"}[i%2]
		wg.Go(func() {
			start := time.Now()
			resp, err := probe.Get(url)
			lat[i] = time.Since(start)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = &net.AddrError{Err: resp.Status, Addr: url}
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

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
