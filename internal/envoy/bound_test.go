package envoy

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A listener whose accept queue is full drops the SYN and a blocking connect
// waits for minutes; the probe must not (its answer: bound).
func TestBoundWithAFullBacklogIsBounded(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}
	// Fill the backlog: nobody accepts.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 4 {
		c, err := net.DialTimeout("tcp", addr.String(), 200*time.Millisecond)
		if err != nil {
			break
		}
		held = append(held, c)
	}
	a, err := adminFor("http://" + addr.String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	bound, err := a.Bound(ctx)
	if took := time.Since(began); took > time.Second {
		t.Fatalf("Bound took %v against a full backlog", took)
	}
	if err != nil || !bound {
		t.Fatalf("Bound = %v, %v; want bound", bound, err)
	}
}
