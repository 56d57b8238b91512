package portwatch

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openListeners listens on IPv4 and IPv6 loopback and on the dual-stack wildcard, and
// returns the sockets Listening should report for them.
func openListeners(t *testing.T) ([]net.Listener, []Socket) {
	t.Helper()
	var (
		lns  []net.Listener
		want []Socket
	)
	for _, la := range []struct{ network, addr string }{
		{"tcp4", "127.0.0.1:0"},
		{"tcp6", "[::1]:0"},
		{"tcp", ":0"}, // [::], accepting IPv4 too
	} {
		ln, err := net.Listen(la.network, la.addr)
		if err != nil {
			t.Fatalf("listen %s %s: %v", la.network, la.addr, err)
		}
		t.Cleanup(func() { ln.Close() })
		lns = append(lns, ln)
		want = append(want, Socket{
			Addr:  ln.Addr().(*net.TCPAddr).AddrPort(),
			UID:   uint32(os.Getuid()),
			Inode: inode(t, ln.(*net.TCPListener)),
		})
	}
	return lns, want
}

func inode(t *testing.T, ln *net.TCPListener) uint64 {
	t.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	var statErr error
	if err := rc.Control(func(fd uintptr) { statErr = unix.Fstat(int(fd), &st) }); err != nil {
		t.Fatal(err)
	}
	if statErr != nil {
		t.Fatal(statErr)
	}
	return st.Ino
}

func TestListeningRealSockets(t *testing.T) {
	scanners := []struct {
		name string
		scan func(t *testing.T) []Socket
	}{
		{name: "netlink", scan: func(t *testing.T) []Socket {
			s := NewScanner(nil)
			socks, err := s.Listening()
			if err != nil {
				t.Fatal(err)
			}
			if s.Fallback() {
				t.Skip("netlink sock_diag is refused here")
			}
			return socks
		}},
		{name: "procnet", scan: func(t *testing.T) []Socket {
			socks, err := ScanProc()
			if err != nil {
				t.Fatal(err)
			}
			return socks
		}},
	}
	for _, sc := range scanners {
		t.Run(sc.name, func(t *testing.T) {
			lns, want := openListeners(t)
			got := sc.scan(t)
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("listener %v missing from %v", w, got)
				}
			}
			for _, ln := range lns {
				ln.Close()
			}
			got = sc.scan(t)
			for _, w := range want {
				// Inodes, unlike ephemeral ports, are not handed to the next socket.
				if i := slices.IndexFunc(got, func(g Socket) bool { return g.Inode == w.Inode }); i >= 0 {
					t.Errorf("closed listener %v still reported as %v", w, got[i])
				}
			}
		})
	}
}

func TestScannerFallsBackOnce(t *testing.T) {
	var logs bytes.Buffer
	s := NewScanner(slog.New(slog.NewTextHandler(&logs, nil)))
	dials := 0
	s.dial = func() (diagConn, error) {
		dials++
		return nil, &os.SyscallError{Syscall: "socket", Err: unix.EPROTONOSUPPORT}
	}
	_, want := openListeners(t)
	for i := range 3 {
		got, err := s.Listening()
		if err != nil {
			t.Fatalf("scan %d: %v", i, err)
		}
		if !s.Fallback() {
			t.Fatalf("scan %d: Fallback() = false after a refusal", i)
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("scan %d: listener %v missing", i, w)
			}
		}
	}
	if dials != 1 {
		t.Errorf("netlink tried %d times, want once", dials)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "protocol not supported") {
		t.Errorf("want one log line naming the refusal, got %d:\n%s", n, logs.String())
	}
}

func TestScannerRefusedByNetlinkError(t *testing.T) {
	c := &fakeConn{answers: [][][]byte{readHex(t, "diag_error.hex")}}
	s := NewScanner(nil)
	s.dial = func() (diagConn, error) { return c, nil }
	if _, err := s.Listening(); err != nil {
		t.Fatal(err)
	}
	if !s.Fallback() {
		t.Error("an EPERM answer did not lead to the /proc fallback")
	}
	if !c.closed {
		t.Error("netlink socket left open")
	}
}

func TestScannerTransientErrorKeepsNetlink(t *testing.T) {
	s := NewScanner(nil)
	var conns []*fakeConn
	s.dial = func() (diagConn, error) {
		// Answers the IPv4 dump and never the IPv6 one, as if the kernel stalled.
		c := &fakeConn{answers: [][][]byte{readHex(t, "diag_inet.hex"), nil}}
		conns = append(conns, c)
		return c, nil
	}
	for range 2 {
		socks, err := s.Listening()
		if !errors.Is(err, unix.EAGAIN) || socks != nil {
			t.Fatalf("Listening() = %v, %v; want no sockets and the timeout", socks, err)
		}
		if !strings.Contains(err.Error(), "IPv6") {
			t.Errorf("error %q does not say which dump failed", err)
		}
	}
	if s.Fallback() || len(conns) != 2 {
		t.Errorf("Fallback() = %v after %d scans; a timeout must not give up on netlink", s.Fallback(), len(conns))
	}
	for i, c := range conns {
		if !c.closed || !slices.Equal(c.sent, []uint8{unix.AF_INET, unix.AF_INET6}) {
			t.Errorf("scan %d: closed %v, families asked %v", i, c.closed, c.sent)
		}
	}
}
