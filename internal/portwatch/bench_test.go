package portwatch

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// BenchmarkScan times one scan with that many established loopback connections in
// the namespace. sock_diag's LISTEN filter keeps netlink's cost flat, while reading
// /proc/net/tcp makes the kernel format every connection.
func BenchmarkScan(b *testing.B) {
	scans := []struct {
		name string
		scan func(b *testing.B) func() ([]Socket, error)
	}{
		{name: "netlink", scan: func(b *testing.B) func() ([]Socket, error) {
			s := NewScanner(nil)
			if _, err := s.Listening(); err != nil || s.Fallback() {
				b.Skipf("netlink sock_diag unavailable: %v", err)
			}
			return s.Listening
		}},
		{name: "procnet", scan: func(*testing.B) func() ([]Socket, error) { return ScanProc }},
	}
	for _, sc := range scans {
		b.Run(sc.name, func(b *testing.B) {
			for _, n := range []int{0, 1000, 10000} {
				b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
					ln := loopbackConns(b, n)
					scan := sc.scan(b)
					var socks []Socket
					for b.Loop() {
						var err error
						if socks, err = scan(); err != nil {
							b.Fatal(err)
						}
					}
					port := ln.Addr().(*net.TCPAddr).AddrPort()
					if !slices.ContainsFunc(socks, func(s Socket) bool { return s.Addr == port }) {
						b.Fatalf("listener %v missing from the scan", port)
					}
				})
			}
		})
	}
}

// loopbackConns returns a listener with n established connections to it, all closed
// when b ends. Each connection is two descriptors, and 10000 of them would not fit
// under a 20000 hard RLIMIT_NOFILE that an unprivileged container cannot raise, so a
// child process holds the dialing ends; the connections are in this network namespace
// all the same.
func loopbackConns(b *testing.B, n int) net.Listener {
	raiseNoFile(b, n+1024)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	accepted := make(chan []net.Conn, 1)
	go func() {
		var conns []net.Conn
		for range n {
			c, err := ln.Accept()
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		accepted <- conns
	}()

	cmd := exec.Command(os.Args[0], "-test.run=^TestDialHelper$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d", dialHelperEnv, ln.Addr(), n))
	cmd.Stderr = os.Stderr
	stdin, stdout := proctest.Piped(b, cmd)
	// Closing the child's stdin tells it to close its connections and exit.
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	ready, err := bufio.NewReader(stdout).ReadString('\n')
	if ready != "ready\n" {
		b.Fatalf("dial helper: %q, %v", ready, err)
	}
	served := <-accepted
	b.Cleanup(func() {
		for _, c := range served {
			c.Close()
		}
	})
	if len(served) != n {
		b.Fatalf("accepted %d of %d connections", len(served), n)
	}
	return ln
}

const dialHelperEnv = "PORTWATCH_DIAL_HELPER"

// TestDialHelper is the child process of loopbackConns: it dials "addr,n" from its
// environment, reports ready, and holds the connections until stdin closes.
func TestDialHelper(t *testing.T) {
	spec, ok := os.LookupEnv(dialHelperEnv)
	if !ok {
		t.Skip("only runs as loopbackConns's child")
	}
	addr, count, _ := strings.Cut(spec, ",")
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatalf("connection %d of %d: %v", len(conns)+1, n, err)
		}
		// A reset instead of a FIN leaves no TIME_WAIT entries to inflate the
		// /proc/net/tcp of the benchmarks that follow.
		c.(*net.TCPConn).SetLinger(0)
		conns = append(conns, c)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	os.Exit(0) // keep the test framework's PASS off the parent's pipe
}

// raiseNoFile lifts RLIMIT_NOFILE to at least want for the rest of b.
func raiseNoFile(b *testing.B, want int) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		b.Fatal(err)
	}
	if old.Cur >= uint64(want) {
		return
	}
	lim := unix.Rlimit{Cur: uint64(want), Max: max(old.Max, uint64(want))}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		b.Skipf("need %d descriptors, have %d: %v", want, old.Cur, err)
	}
	b.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
}
