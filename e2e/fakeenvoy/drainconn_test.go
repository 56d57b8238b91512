package fakeenvoy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// tcpEcho is a raw connection to a tcp_proxy listener that echoes.
type tcpEcho struct {
	t  *testing.T
	nc net.Conn
}

func dialTCP(t *testing.T, addr string) *tcpEcho {
	t.Helper()
	return &tcpEcho{t: t, nc: dialHTTP(t, addr).nc}
}

// echo sends one byte and reads it back, then reports whether the proxy
// closed the connection after it (within wait).
func (c *tcpEcho) echo(b byte, wait time.Duration) (closed bool) {
	c.t.Helper()
	c.nc.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.nc.Write([]byte{b}); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	got := make([]byte, 1)
	if _, err := io.ReadFull(c.nc, got); err != nil || got[0] != b {
		c.t.Fatalf("echo: %q, %v", got, err)
	}
	c.nc.SetReadDeadline(time.Now().Add(wait))
	_, err := c.nc.Read(got)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// An inbound tcp_proxy connection across the sidecar's drain, per release
// and with or without tcp_proxy's check_drain_close: it is told nothing
// unless the release knows check_drain_close (envoy#44567, 1.39.0) and the
// listener sets it; then it closes at its next bytes, which it still gets
// through (FlushWrite). An outbound one never is: the drain covers inbound
// listeners only.
func TestTCPProxyAcrossADrain(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		version string
		check   bool
		closes  bool
	}{
		{"1.38", true, false},
		{"1.39", false, false},
		{"1.39", true, true},
		{"1.40", false, false},
		{"1.40", true, true},
		{"next", false, false},
		{"next", true, true},
	} {
		t.Run(fmt.Sprintf("%s/check_drain_close=%v", tt.version, tt.check), func(t *testing.T) {
			t.Parallel()
			v, err := ParseVersion(tt.version)
			if err != nil {
				t.Fatal(err)
			}
			e := startLive(t, Options{Version: v, DrainTime: time.Minute, DrainStrategy: "immediate", Listeners: []Listener{
				{Name: "in", Addr: "127.0.0.1:0", Inbound: true, TCP: true, CheckDrainClose: tt.check},
				{Name: "out", Addr: "127.0.0.1:0", TCP: true, CheckDrainClose: tt.check},
			}})
			in, out := dialTCP(t, e.ListenerAddrs()[0].String()), dialTCP(t, e.ListenerAddrs()[1].String())
			if in.echo('a', 50*time.Millisecond) || out.echo('a', 50*time.Millisecond) {
				t.Fatal("closed before the drain")
			}
			if a := call(t, e, "POST", "/drain_listeners?graceful&inboundonly&skip_exit"); a.code != 200 {
				t.Fatalf("drain: %d %q", a.code, a.body)
			}
			// The drain itself closes nothing: the decision waits for bytes.
			if in.closedSilently(300 * time.Millisecond) {
				t.Fatal("the inbound connection closed with no bytes passing")
			}
			if got := in.echo('b', time.Second); got != tt.closes {
				t.Errorf("inbound closed at its next bytes = %v, want %v", got, tt.closes)
			}
			if out.echo('b', 300*time.Millisecond) {
				t.Error("the outbound connection was closed by an inbound-only drain")
			}
		})
	}
}

// closedSilently reports whether the proxy closed the connection within d
// while nothing was sent.
func (c *tcpEcho) closedSilently(d time.Duration) bool {
	c.nc.SetReadDeadline(time.Now().Add(d))
	_, err := c.nc.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// wsUpstream is an app that takes an upgrade and echoes what follows.
func wsUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			io.WriteString(w, "app")
			return
		}
		proctest.EchoUpgrade(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// upgrade opens a WebSocket-like stream through addr and checks it echoes.
func upgrade(t *testing.T, addr string) *tcpEcho {
	t.Helper()
	c := dialTCP(t, addr)
	c.nc.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c.nc, "GET /ws HTTP/1.1\r\nHost: app\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c.nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the 101")
	}
	if c.echo('u', 50*time.Millisecond) {
		t.Fatal("the upgraded stream closed at once")
	}
	return c
}

// A WebSocket stream and an idle keep-alive into the app across the
// sidecar's drain (skip_exit: no listener ever stops), per release: up to
// 1.40 no drain tells either, as no response follows; the next release
// drains both in the last third of --drain-time-s, not before, even under
// skip_exit (http__proactive_connection_drain.rst).
func TestUpgradedStreamAcrossADrain(t *testing.T) {
	t.Parallel()
	const drainTime = 3 * time.Second
	for _, tt := range []struct {
		version string
		cut     bool
	}{
		{"1.36", false},
		{"1.40", false},
		{"next", true},
	} {
		t.Run(tt.version, func(t *testing.T) {
			t.Parallel()
			v, err := ParseVersion(tt.version)
			if err != nil {
				t.Fatal(err)
			}
			app := wsUpstream(t)
			e := startLive(t, Options{Version: v, DrainTime: drainTime, DrainStrategy: "immediate", Listeners: []Listener{{
				Name: "in", Addr: "127.0.0.1:0", Inbound: true, DrainTimeout: 100 * time.Millisecond,
				Routes: []Route{{Prefix: "/", Cluster: "app", Upstream: strings.TrimPrefix(app.URL, "http://")}},
			}}})
			addr := e.ListenerAddrs()[0].String()
			ws, idle := upgrade(t, addr), dialHTTP(t, addr)
			if idle.get() {
				t.Fatal("the keep-alive told to close before the drain")
			}
			if a := call(t, e, "POST", "/drain_listeners?graceful&inboundonly&skip_exit"); a.code != 200 {
				t.Fatalf("drain: %d %q", a.code, a.body)
			}
			started := time.Now()
			// Before 2/3 of the drain time both are left alone.
			if ws.echo('v', 0) || idle.closedByPeer(time.Until(started.Add(drainTime*2/3-300*time.Millisecond))) {
				t.Fatal("closed before the last third of the drain time")
			}
			idleCut := idle.closedByPeer(time.Until(started.Add(drainTime + 500*time.Millisecond)))
			wsCut := ws.closedSilently(time.Until(started.Add(drainTime + 500*time.Millisecond)))
			if idleCut != tt.cut || wsCut != tt.cut {
				t.Errorf("by the drain time's end: idle keep-alive closed %v, WebSocket cut %v; want %v", idleCut, wsCut, tt.cut)
			}
			if !tt.cut && ws.echo('w', 0) {
				t.Error("the WebSocket stream no longer echoes")
			}
		})
	}
}
