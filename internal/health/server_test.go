package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/metrics"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/flood"
)

var discard = slog.New(slog.DiscardHandler)

// serveReady runs a health server that is always ready, until the test
// ends, and returns its address.
func serveReady(t *testing.T) string {
	t.Helper()
	s, err := listenOn("127.0.0.1:0", func() (bool, string) { return true, "" }, nil, metrics.NewRegistry(), discard)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	return s.Addr().String()
}

// One source holding 400 connections that trickle header bytes must not
// starve the kubelet's probes: each probe is a new connection from another
// address with the kubelet's 3 s timeout, and every one is answered.
func TestProbesAnsweredUnderSlowHeaderFlood(t *testing.T) {
	addr := serveReady(t)

	ctx, cancel := context.WithCancel(context.Background())
	from := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: time.Second}
	load := flood.SlowHeaders(ctx, func(ctx context.Context, _ int) (net.Conn, error) {
		return from.DialContext(ctx, "tcp", addr)
	}, 400)
	defer func() { cancel(); load.Wait() }()
	// Let the flood take every slot it can, and outlive one header timeout,
	// so that the probes meet it in its steady state.
	time.Sleep(headerTimeout + 500*time.Millisecond)

	kubelet := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	send := flood.Send(func(ctx context.Context) (net.Conn, error) { return kubelet.DialContext(ctx, "tcp", addr) })
	lat, errs := flood.Probes(send, []string{"/healthz/ready", "/healthz/live"}, 8, 250*time.Millisecond, 3*time.Second)
	t.Logf("probe latencies under the flood: %v (max %v)", lat, slices.Max(lat))
	for i, err := range errs {
		if err != nil {
			t.Errorf("probe %d: %v after %v", i, err, lat[i])
		}
	}
}

// A check that panics costs its probe the connection, not the process
// (PID 1 of the proxy's container) its life: the next probe is answered.
func TestAPanickingCheckLeavesTheServerUp(t *testing.T) {
	s, err := listenOn("127.0.0.1:0", func() (bool, string) { panic("a bug in a check") }, nil, metrics.NewRegistry(), discard)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	client := &http.Client{Timeout: 5 * time.Second}
	if resp, err := client.Get("http://" + s.Addr().String() + "/healthz/ready"); err == nil {
		resp.Body.Close()
		t.Fatalf("a panicking check answered %s", resp.Status)
	}
	resp, err := client.Get("http://" + s.Addr().String() + "/healthz/live")
	if err != nil {
		t.Fatalf("a probe after the panic: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a probe after the panic: %s", resp.Status)
	}
}

// At its cap the listener closes the connection that has gone longest
// without sending a byte: bytes that wait unread count as sent at once,
// since the goroutine that reads them may run late under a flood. Among
// connections that sent nothing, the oldest goes.
func TestCapClosesTheQuietest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newFairListener(ln, 2, 16)
	defer l.Close()
	connect := func(i byte, head string) (client, server net.Conn) { return connectFrom(t, l, 0, i, head) }
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil
	}
	probe, _ := connect(1, "GET /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n") // the oldest, its request unread
	silent, _ := connect(2, "")
	connect(3, "") // at the cap: one of the two goes
	if !closed(silent) {
		t.Fatal("the silent connection was kept")
	}
	probe.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := probe.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection whose request waits was closed: %v", err)
	}
}

// A connection whose request has been read and is being answered is not
// closed at the cap, however long its answer takes: the probe's client has
// said all, and on a starved node the gap from its read to its answer's
// write outlasted every trickling client's last byte.
func TestCapKeepsTheConnectionBeingAnswered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newFairListener(ln, 2, 16)
	defer l.Close()
	connect := func(i byte, head string) (client, server net.Conn) { return connectFrom(t, l, 1, i, head) }
	req := "GET /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n"
	probe, served := connect(1, req)
	if _, err := io.ReadFull(served, make([]byte, len(req))); err != nil {
		t.Fatal(err)
	}
	served.(http1.Answerer).Answering(true) // what the server says once it has the head
	silent, _ := connect(2, "")             // newer than the probe's read
	connect(3, "")                          // at the cap: one of the two goes
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatal("the silent connection was kept")
	}
	probe.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := probe.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection being answered was closed: %v", err)
	}
}

// connectFrom makes a client connection to l from its own address,
// 127.3.net.i, writing head at once, and returns it with the listener's
// side.
func connectFrom(t *testing.T, l *fairListener, net3, i byte, head string) (client, server net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 3, net3, i)}, Timeout: 5 * time.Second}
	client, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if _, err := client.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	if server, err = l.Accept(); err != nil {
		t.Fatal(err)
	}
	return client, server
}

// listenOn builds the server for addr and binds it.
func listenOn(addr string, ready, live Check, reg *metrics.Registry, log *slog.Logger) (*Server, error) {
	s := New(addr, ready, live, reg, log)
	if err := s.Listen(); err != nil {
		return nil, err
	}
	return s, nil
}
