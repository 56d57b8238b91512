package portwatch

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watch opens an OpenScanner on netlink, or skips where sock_diag is refused.
func watch(t *testing.T, s *Scanner) *OpenScanner {
	t.Helper()
	w := s.Open()
	t.Cleanup(w.Close)
	if _, err := w.Listening(); err != nil {
		t.Fatal(err)
	}
	if s.Fallback() {
		t.Skip("netlink sock_diag is refused here")
	}
	return w
}

// countingConn counts what a scan asks of the kernel.
type countingConn struct {
	diagConn
	sends, recvs int
}

func (c *countingConn) send(req []byte) error        { c.sends++; return c.diagConn.send(req) }
func (c *countingConn) recv(buf []byte) (int, error) { c.recvs++; return c.diagConn.recv(buf) }

// A drain scans its OpenScanner for as long as the app listens, so a scan's cost
// is the OpenScanner's: one netlink socket for its life, a request and its answer
// per family, no allocation. Those counts, unlike CPU time, do not depend on
// the machine's load; each syscall or allocation more is paid on every scan.
func TestOpenScannerScanCost(t *testing.T) {
	s := NewScanner(nil)
	var conns []*countingConn
	s.dial = func() (diagConn, error) {
		c, err := dialNetlink()
		if err != nil {
			return nil, err
		}
		cc := &countingConn{diagConn: c}
		conns = append(conns, cc)
		return cc, nil
	}
	w := watch(t, s)
	_, want := openListeners(t)
	const scans = 50
	for range scans {
		got, err := w.Listening()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range want {
			if !slices.Contains(got, l) {
				t.Fatalf("listener %v missing from %v", l, got)
			}
		}
	}
	if len(conns) != 1 {
		t.Fatalf("%d netlink sockets opened for %d scans, want 1", len(conns), scans+1)
	}
	c := conns[0]
	// Every dump ends with a datagram of its own (NLMSG_DONE); a few
	// listeners fit in the first.
	if c.sends != 2*(scans+1) || c.recvs > 4*(scans+1) {
		t.Errorf("%d sends and %d reads for %d scans, want 2 and at most 4 a scan", c.sends, c.recvs, scans+1)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := w.Listening(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a scan allocates %v times, want 0", n)
	}
}

func TestOpenScannerReportsAListenerClose(t *testing.T) {
	w := watch(t, NewScanner(nil))
	if w.Closed() == nil {
		t.Skip("no sock_diag destroy broadcast here")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// What closed before, elsewhere in this namespace, is not this test's.
	for drained := false; !drained; {
		select {
		case <-w.Closed():
		default:
			drained = true
		}
	}
	port := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	select {
	case _, ok := <-w.Closed():
		if !ok {
			t.Fatal("the OpenScanner stopped telling")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a listener's close was not reported within 5 s")
	}
	got, err := w.Listening()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(got, func(s Socket) bool { return s.Addr == port }) {
		t.Errorf("closed listener %v still listed", port)
	}
}

// The kernel runs destroyFilter on every TCP socket's destroy message: only
// those without a peer port (listeners) may wake the drain. The kernel runs
// it here too, on messages of that shape (runFilter).
func TestDestroyFilter(t *testing.T) {
	const tcpClose = 7
	for _, tt := range []struct {
		name  string
		dport uint16
		want  bool
	}{
		{"listener", 0, true},
		{"connection", 443, false},
		{"connection to port 256", 256, false},
	} {
		p := diagMsg(tcpClose, Socket{Addr: netip.MustParseAddrPort("127.0.0.1:8080")})
		binary.BigEndian.PutUint16(p[diagDport:], tt.dport)
		msg := nlmsg(unix.SOCK_DIAG_BY_FAMILY, 0, 0, p)
		want := 0
		if tt.want {
			want = len(msg)
		}
		if kept := runFilter(t, msg); kept != want {
			t.Errorf("%s: kept %d of %d bytes, want %d", tt.name, kept, len(msg), want)
		}
	}
	if kept := runFilter(t, nlmsg(unix.NLMSG_DONE, 0, 0, i32(0))); kept != 0 {
		t.Errorf("a short message: kept %d bytes, want none", kept)
	}
}

// runFilter is how many bytes of msg destroyFilter keeps, run by the kernel:
// the filter is attached to one end of a unix datagram socket pair, which
// drops silently what its filter refuses and cuts what it shortens, and msg
// is sent from the other end.
func runFilter(t *testing.T, msg []byte) int {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	prog := unix.SockFprog{Len: uint16(len(destroyFilter)), Filter: &destroyFilter[0]}
	if err := unix.SetsockoptSockFprog(fds[1], unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fds[0], msg); err != nil {
		t.Fatal(err)
	}
	// The send has queued the message, or dropped it, by the time it returns.
	buf := make([]byte, len(msg)+1)
	n, _, err := unix.Recvfrom(fds[1], buf, unix.MSG_DONTWAIT)
	if err == unix.EAGAIN {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOpenScannerOnProcFallbackIsNotTold(t *testing.T) {
	s := NewScanner(nil)
	s.fallback.Store(true)
	w := s.Open()
	defer w.Close()
	if w.Closed() != nil {
		t.Error("an OpenScanner on /proc/net/tcp claims to report closes")
	}
	if _, err := w.Listening(); err != nil {
		t.Fatal(err)
	}
}
