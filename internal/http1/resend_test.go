package http1

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

// testClient is a Client of an httptest server.
func testClient(t *testing.T, srv *httptest.Server) *Client {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{Dial: URL{Network: "tcp", Addr: u.Host}.Dial(time.Second), Host: u.Host, MaxBody: 1 << 10}
	t.Cleanup(c.CloseIdle)
	return c
}

// A server that closes its idle connections closes all of them, and the
// Client keeps two: the one resend goes over a new connection, not over the
// other kept one, which is as dead.
func TestResendDialsWhenEveryKeptConnectionIsClosed(t *testing.T) {
	var inFlight sync.WaitGroup
	inFlight.Add(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/pair" {
			// Both requests in flight at once leave two kept connections.
			inFlight.Done()
			both := make(chan struct{})
			go func() { inFlight.Wait(); close(both) }()
			select {
			case <-both:
			case <-time.After(5 * time.Second): // the test then fails on its count
			}
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	c := testClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := c.Do(ctx, "GET", "/pair"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(c.idle); n != 2 {
		t.Fatalf("%d kept connections, want 2", n)
	}
	srv.CloseClientConnections()
	resp, err := c.Do(ctx, "GET", "/after")
	if err != nil || resp.Code != 200 || string(resp.Body) != "ok" {
		t.Fatalf("after the server closed its idle connections: %+v, %v", resp, err)
	}
}

// A request cut by its context's deadline says so (context.DeadlineExceeded),
// whichever of the connection's deadline and the context's timer fires
// first: callers tell "no answer in time" from other failures by it.
func TestDeadlineIsTheContexts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts and never answers
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			defer cn.Close()
		}
	}()
	c := &Client{Dial: URL{Network: "tcp", Addr: ln.Addr().String()}.Dial(time.Second), Host: "x", MaxBody: 1 << 10}
	for i := range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		_, err := c.Do(ctx, "GET", "/")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("request %d: %v, want context.DeadlineExceeded", i, err)
		}
	}
}
