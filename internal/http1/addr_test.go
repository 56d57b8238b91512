package http1

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The supervisor resolves no names (its binary carries no resolver): a
// name other than localhost is refused when the URL or address is read,
// with a line that says why, rather than failing at every dial.
func TestNamesOtherThanLocalhostAreRefused(t *testing.T) {
	for _, host := range []string{"envoy", "pod.ns.svc", "localhost.localdomain", "pod.ns.svc.cluster.local."} {
		if err := CheckHost(host); err == nil || !strings.Contains(err.Error(), "resolves no names") {
			t.Errorf("CheckHost(%q) = %v, want a refusal that says why", host, err)
		}
		if u, err := ParseURL("http://" + host + ":15000/"); err == nil {
			t.Errorf("ParseURL took %q as %+v", host, u)
		}
	}
	for _, host := range []string{"localhost", "LocalHost", "localhost.", "127.0.0.1", "::1", "10.1.2.3", "fe80::1%eth0"} {
		if err := CheckHost(host); err != nil {
			t.Errorf("CheckHost(%q): %v", host, err)
		}
	}
}

// localhost is 127.0.0.1 and then ::1, as a pod's /etc/hosts has it: a
// server that binds either is reached.
func TestLocalhostReachesEitherLoopback(t *testing.T) {
	for _, ip := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
		ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		if err != nil {
			t.Logf("%s: %v (no such loopback here)", ip, err)
			continue
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).AddrPort().Port()
		u, err := ParseURL(fmt.Sprintf("http://localhost:%d/", port))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := u.Dial(time.Second)(ctx)
		if err != nil {
			t.Errorf("localhost with a server on %s: %v", ip, err)
			continue
		}
		c.Close()
		if got := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr(); got != ip {
			t.Errorf("localhost with a server on %s reached %s", ip, got)
		}
	}
}

// A dial ends with its context, and with its own timeout when the context
// has none: against a listener that takes no more connections the kernel
// would retry the SYN for minutes.
func TestDialIsBounded(t *testing.T) {
	addr := proctest.FullBacklog(t).String()
	for _, c := range []struct {
		name    string
		timeout time.Duration // the dial's
		ctx     time.Duration // the context's; 0 for none
	}{{"context", time.Hour, 100 * time.Millisecond}, {"timeout", 100 * time.Millisecond, 0}} {
		ctx := context.Background()
		if c.ctx > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.ctx)
			defer cancel()
		}
		done := make(chan error, 1)
		go func() {
			conn, err := URL{Network: "tcp", Addr: addr}.Dial(c.timeout)(ctx)
			if err == nil {
				conn.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s: err %v, want a timeout", c.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the dial outlived its bound of 100ms by 10s", c.name)
		}
	}
}
