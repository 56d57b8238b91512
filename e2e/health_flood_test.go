package e2e

import (
	"context"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/flood"
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
	from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: time.Second}
	wait := flood.SlowHeaders(ctx, func(ctx context.Context) (c net.Conn, err error) {
		err = p.netns.Do(func() error { c, err = from.DialContext(ctx, "tcp", "127.0.0.1:15022"); return err })
		return c, err
	}, 400)
	defer func() { cancel(); wait() }()
	time.Sleep(2500 * time.Millisecond) // past one header timeout: the flood's steady state

	probe := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: p.netns.Dial, DisableKeepAlives: true}}
	lat, errs := flood.Probes(probe, []string{readyURL, "http://127.0.0.1:15022/healthz/live"}, 8, 250*time.Millisecond)
	t.Logf("probe latencies under the flood: %v (max %v)", lat, slices.Max(lat))
	for i, err := range errs {
		if err != nil {
			t.Errorf("probe %d: %v after %v", i, err, lat[i])
		}
	}
}
