package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/flood"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
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
	load := flood.SlowHeaders(ctx, func(ctx context.Context, _ int) (c net.Conn, err error) {
		err = p.netns.Do(func() error { c, err = from.DialContext(ctx, "tcp", "127.0.0.1:15022"); return err })
		return c, err
	}, 400)
	defer func() { cancel(); load.Wait() }()
	time.Sleep(2500 * time.Millisecond) // past one header timeout: the flood's steady state

	lat, errs := flood.Probes(p.probeSend(), []string{"/healthz/ready", "/healthz/live"}, 8, 250*time.Millisecond, 3*time.Second)
	t.Logf("probe latencies under the flood: %v (max %v)", lat, slices.Max(lat))
	for i, err := range errs {
		if err != nil {
			t.Errorf("probe %d: %v after %v", i, err, lat[i])
		}
	}
}

// A thousand sources, each holding one connection to the health port (each
// its own loopback address, so that the per-source cap never applies), and
// reconnecting as soon as it is closed, must not cost the kubelet one
// probe: 20 of 20 probes from another address, alternately readiness and
// liveness (whose failures would restart a healthy proxy), each answered
// within the 3 s the shipped manifests' probes allow (timeoutSeconds 3, as
// Istio's injector sets). With the connection to close chosen among
// equals, 10 to 15 of 20 were reset. Beside stress-ng, the kubelet suite
// and the flood's own thousand clients (1-minute load 42), two of 20 took
// 1.1 s, past the kubelet's default 1 s.
func TestHealthProbesUnderManySources(t *testing.T) {
	const clients, probes = 1000, 20
	for _, tt := range []struct {
		name string
		load func(context.Context, func(context.Context, int) (net.Conn, error), int) *flood.Load
	}{
		{"silent", flood.Silent},
		{"one byte at a time", flood.SlowHeaders},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPod(t)
			p.supervise(nil)
			p.waitHTTP(readyURL, 200, 10*time.Second)

			ctx, cancel := context.WithCancel(context.Background())
			load := tt.load(ctx, func(ctx context.Context, i int) (c net.Conn, err error) {
				from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 1, byte((i+1)>>8), byte(i+1))}, Timeout: time.Second}
				err = p.netns.Do(func() error { c, err = from.DialContext(ctx, "tcp", "127.0.0.1:15022"); return err })
				return c, err
			}, clients)
			defer func() { cancel(); load.Wait() }()
			// The flood's steady state: the port is at its cap, and every
			// client has had a connection closed, or failed to make one.
			if !proctest.Until(30*time.Second, func() bool { return load.Closed() >= clients }) {
				t.Fatalf("the flood saw %d closes in 30s, want %d", load.Closed(), clients)
			}

			lat, errs := flood.Probes(p.probeSend(), []string{"/healthz/ready", "/healthz/live"}, probes, 100*time.Millisecond, 3*time.Second)
			t.Logf("probe latencies under %d %s clients (%d of their connections closed): %v (max %v)",
				clients, tt.name, load.Closed(), lat, slices.Max(lat))
			for i, err := range errs {
				if err != nil {
					t.Errorf("probe %d: %v after %v", i, err, lat[i])
				}
			}
		})
	}
}

// probeSend is the kubelet's connection to the health port, for
// flood.Probes: from the pod's network namespace, connected and written
// with blocking system calls on one thread, so that the request follows the
// connect at once however busy the test process is with its flood (a
// connect that waits for Go's poller to be woken went out 200 ms late, and
// met a server that had closed it as silent).
func (p *pod) probeSend() func(ctx context.Context, req []byte) (net.Conn, error) {
	return func(ctx context.Context, req []byte) (c net.Conn, err error) {
		err = p.netns.Do(func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			f := os.NewFile(uintptr(fd), "probe")
			defer f.Close()
			// SO_SNDTIMEO bounds the connect and the write.
			tv := unix.NsecToTimeval(time.Second.Nanoseconds())
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
				return err
			}
			if err := unix.Connect(fd, &unix.SockaddrInet4{Port: 15022, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				return fmt.Errorf("connect: %w", err)
			}
			if _, err := unix.Write(fd, req); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			c, err = net.FileConn(f)
			return err
		})
		return c, err
	}
}
