package portwatch

import (
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var captureDir = flag.String("capture", "", "capture fresh sock_diag and /proc/net fixtures into this directory (see testdata/README)")

// Ports the captured fixtures listen on.
const (
	capLoopback4 = 47001 // 127.0.0.1
	capAny4      = 47002 // 0.0.0.0
	capLoopback6 = 47003 // [::1]
	capDual      = 47004 // [::], dual-stack
	capMapped    = 47005 // [::ffff:127.0.0.1]
)

// TestCaptureFixtures records what this kernel answers, so that the parser tests run
// against real bytes. It only runs when asked for, because the result depends on
// what else listens on the machine; testdata/README gives the command.
func TestCaptureFixtures(t *testing.T) {
	if *captureDir == "" {
		t.Skip("run with -capture DIR to record fixtures")
	}
	listen := func(network, addr string) {
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	listen("tcp4", fmt.Sprint("127.0.0.1:", capLoopback4))
	listen("tcp4", fmt.Sprint("0.0.0.0:", capAny4))
	listen("tcp6", fmt.Sprint("[::1]:", capLoopback6))
	listen("tcp", fmt.Sprint(":", capDual))
	listenMapped(t, capMapped)
	// An established connection proves the state filter keeps it out of the dump.
	conn, err := net.Dial("tcp4", fmt.Sprint("127.0.0.1:", capLoopback4))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	c, err := dialNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	buf := make([]byte, recvBufSize)
	for family, name := range map[uint8]string{unix.AF_INET: "diag_inet.hex", unix.AF_INET6: "diag_inet6.hex"} {
		req := diagRequest(family, 1)
		if err := c.send(req[:]); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		fmt.Fprintf(&out, "# sock_diag dump, family %s, captured by TestCaptureFixtures; one datagram per line\n", familyName(family))
		for done := false; !done; {
			n, err := c.recv(buf)
			if err != nil {
				t.Fatal(err)
			}
			out.WriteString(hex.EncodeToString(buf[:n]) + "\n")
			_, st, err := parseDiag(buf[:n], nil)
			if err != nil {
				t.Fatal(err)
			}
			done = st.done
		}
		writeCapture(t, name, out.String())
	}
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/net/" + name)
		if err != nil {
			t.Fatal(err)
		}
		writeCapture(t, "proc_"+name+".txt", string(b))
	}
}

// listenMapped listens on an IPv4-mapped IPv6 address, which net.Listen would turn
// into an IPv4 socket.
func listenMapped(t *testing.T, port int) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrInet6{Port: port, Addr: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
}

func writeCapture(t *testing.T, name, data string) {
	path := filepath.Join(*captureDir, name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
