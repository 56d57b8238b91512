package http1

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CheckHost accepts an IP address or localhost.
func CheckHost(host string) error {
	_, err := hostAddrs(host)
	return err
}

// hostAddrs is what host names. The supervisor resolves no names: every
// server it asks or binds is in the pod, at an IP address, a unix socket or
// localhost, and net's resolver (dnsmessage and the readers of /etc/hosts,
// resolv.conf and nsswitch.conf) was 140 kB of the binary that such
// addresses never use. localhost is read here as a pod's /etc/hosts has it:
// 127.0.0.1, then ::1.
func hostAddrs(host string) ([]netip.Addr, error) {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}, nil
	}
	if host == "" {
		return nil, errors.New("no host")
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("host %q is neither an IP address nor localhost (the supervisor resolves no names)", host)
	}
	return []netip.Addr{a}, nil
}

// TCPAddrs takes HOST:PORT apart into the addresses it names, in the
// order to try them: one for an IP address, two for localhost. An empty
// host is refused; see ListenTCP for the address of every interface. Port
// 0 is taken, for a listener's port that the kernel picks.
func TCPAddrs(hostport string) ([]netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	hosts, err := hostAddrs(host)
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.AddrPort, len(hosts))
	for i, h := range hosts {
		addrs[i] = netip.AddrPortFrom(h, uint16(p))
	}
	return addrs, nil
}

// ListenTCP binds HOST:PORT, or :PORT for every interface (IPv4 and IPv6).
// localhost binds 127.0.0.1, the first of its addresses, as net.Listen
// would.
func ListenTCP(hostport string) (*net.TCPListener, error) {
	if strings.HasPrefix(hostport, ":") {
		// 0.0.0.0 only stands in for the port's parse: an address without
		// an IP is net's wildcard, both families where the host has both.
		addrs, err := TCPAddrs("0.0.0.0" + hostport)
		if err != nil {
			return nil, err
		}
		return net.ListenTCP("tcp", &net.TCPAddr{Port: int(addrs[0].Port())})
	}
	addrs, err := TCPAddrs(hostport)
	if err != nil {
		return nil, err
	}
	return net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addrs[0]))
}

// DialTCP dials addrs in turn until one connects, the next tried only
// after a refusal (an address that nothing listens on, such as ::1 where
// the server bound 127.0.0.1 alone), and returns the first error. Each
// connect is bounded by ctx, and by timeout unless it is 0.
func DialTCP(ctx context.Context, timeout time.Duration, addrs []netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, ControlContext: bindNoPort}
	var first error
	for _, a := range addrs {
		c, err := d.DialTCP(ctx, "tcp", netip.AddrPort{}, a)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
	}
	return nil, first
}

// bindNoPort lets the connect, not a bind, pick the local port. The
// Dialer's DialTCP, which takes addresses rather than names, binds the
// unspecified address before it connects, and a bind takes a port that no
// socket holds, where a connect takes one that no connection to the same
// peer holds: in a pod whose proxy holds most ephemeral ports, a bind
// fails (EADDRINUSE) where a connect succeeds. IP_BIND_ADDRESS_NO_PORT
// (Linux 4.2) defers the port to the connect; IPv6 sockets take it too.
func bindNoPort(_ context.Context, _, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	}); cerr != nil {
		return cerr
	}
	return err
}
