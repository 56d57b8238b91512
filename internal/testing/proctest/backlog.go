package proctest

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FullBacklog is the address of a loopback listener whose accept queue is
// full, until the test ends: the kernel drops a SYN to it, so a connect
// waits (for minutes, unbounded) instead of being refused, as on a proxy
// whose admin loop has stopped accepting.
func FullBacklog(tb testing.TB) netip.AddrPort {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		tb.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		tb.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
	// Nobody accepts: the connects that the queue takes fill it.
	d := net.Dialer{Timeout: 200 * time.Millisecond}
	for range 4 {
		c, err := d.Dial("tcp", addr.String())
		if err != nil {
			break
		}
		tb.Cleanup(func() { c.Close() })
	}
	return addr
}
