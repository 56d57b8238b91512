package fakeenvoy

import (
	"io"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

func drainOptions(strategy string, drain time.Duration) Options {
	return Options{
		DrainStrategy: strategy,
		DrainTime:     drain,
		Listeners: []Listener{
			{Name: "http", Addr: "127.0.0.1:0", Inbound: true},
			{Name: "tcp", Addr: "127.0.0.1:0", Inbound: true, TCP: true},
		},
	}
}

func echo(t *testing.T, c *httpConn) bool {
	t.Helper()
	c.nc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c.nc, "x"); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c.nc, b)
	return err == nil
}

func TestGracefulImmediateDrain(t *testing.T) {
	t.Parallel()
	const drainTime = 600 * time.Millisecond
	e := startLive(t, drainOptions("immediate", drainTime))
	httpAddr, tcpAddr := e.ListenerAddrs()[0].String(), e.ListenerAddrs()[1].String()
	idle := dialHTTP(t, httpAddr)
	if idle.get() {
		t.Fatal("connection: close before any drain")
	}
	fresh := dialHTTP(t, httpAddr) // connected, no request yet
	tcp := dialHTTP(t, tcpAddr)
	if !echo(t, tcp) {
		t.Fatal("tcp echo")
	}

	began := time.Now()
	if a := call(t, e, "POST", "/drain_listeners?graceful"); a.code != 200 || a.body != "OK\n" {
		t.Fatalf("drain: %d %q", a.code, a.body)
	}
	// As Envoy's, the drain only tells the next response to close: an idle
	// keep-alive connection stays, counted active with no request active.
	if idle.closedByPeer(300 * time.Millisecond) {
		t.Error("a drain closed an idle keep-alive connection; Envoy leaves it to its next response")
	}
	st := stats(t, e, "?filter=^http\\.http\\.downstream_(cx|rq)_active$")
	if st["http.http.downstream_cx_active"] != 2 || st["http.http.downstream_rq_active"] != 0 {
		t.Errorf("HTTP stats during the drain %v; want 2 connections, no request active", st)
	}
	if !idle.get() {
		t.Error("the idle connection's next response lacks connection: close")
	}
	if !idle.closedByPeer(time.Second) {
		t.Error("the idle connection stayed open after its connection: close")
	}
	if !fresh.get() {
		t.Error("first response on a draining listener lacks connection: close")
	}
	if !dialHTTP(t, httpAddr).get() {
		t.Error("new connection during the drain: response lacks connection: close")
	}
	if !echo(t, tcp) {
		t.Error("the TCP proxy acted on the drain")
	}
	if time.Since(began) < drainTime/2 && (refused(httpAddr) || refused(tcpAddr)) {
		t.Error("listeners stopped accepting before the drain time")
	}
	eventually(t, "listeners stopped after the drain time", func() bool { return refused(httpAddr) && refused(tcpAddr) })
	if took := time.Since(began); took < drainTime {
		t.Errorf("listeners stopped after %v, before the %v drain time", took, drainTime)
	}
	if !echo(t, tcp) {
		t.Error("stopping the listeners closed a TCP connection; only its peer may")
	}
	if e.ActiveConnections() < 1 {
		t.Error("the TCP connection is not counted")
	}
	if a := call(t, e, "GET", "/ready"); a.body != "LIVE\n" {
		t.Errorf("/ready %q after a drain", a.body)
	}
}

func TestGracefulGradualDrainSpreadsCloses(t *testing.T) {
	t.Parallel()
	const drainTime = time.Second
	e := startLive(t, drainOptions("gradual", drainTime))
	var conns []*httpConn
	for range 8 {
		c := dialHTTP(t, e.ListenerAddrs()[0].String())
		c.get()
		conns = append(conns, c)
	}
	call(t, e, "POST", "/drain_listeners?graceful&skip_exit")
	// After the call: the fake's drain began while it answered, and a
	// clock started before the call could run out ahead of the fake's.
	began := time.Now()
	time.Sleep(50 * time.Millisecond)
	var open []*httpConn
	for _, c := range conns {
		if !c.get() {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		t.Fatal("a gradual drain told every connection to close at once")
	}
	for _, c := range open {
		if c.closedByPeer(time.Millisecond) {
			t.Fatal("the drain closed an idle keep-alive connection")
		}
	}
	time.Sleep(drainTime - time.Since(began)) // the drain time is the fake's clock
	for _, c := range open {
		if !c.get() {
			t.Error("a response after the drain time lacks connection: close")
		}
	}
	if refused(e.ListenerAddrs()[0].String()) {
		t.Error("skip_exit: the listener stopped")
	}
	// The last closes are counted as their responses go out.
	var got uint64
	if !proctest.Until(5*time.Second, func() bool {
		got = stats(t, e, "?filter=drain_close")["http.http.downstream_cx_drain_close"]
		return got == 8
	}) {
		t.Errorf("downstream_cx_drain_close %d, want 8", got)
	}
}

func TestDuplicateDrainChangesNothing(t *testing.T) {
	t.Parallel()
	const drainTime = 400 * time.Millisecond
	e := startLive(t, drainOptions("immediate", drainTime))
	start := time.Now()
	call(t, e, "POST", "/drain_listeners?graceful")
	time.Sleep(200 * time.Millisecond)
	// A second graceful drain neither restarts the clock nor stops at once.
	if a := call(t, e, "POST", "/drain_listeners?graceful&inboundonly"); a.body != "OK\n" {
		t.Fatalf("second drain: %q", a.body)
	}
	// Refused before the first drain's time is up, the listener was stopped
	// by the second; after it, by the first drain's clock, which a loaded
	// machine can reach before this check (time is read after the dial, so
	// a load can only hide a failure, never make one).
	if refused(e.ListenerAddrs()[0].String()) && time.Since(start) < drainTime {
		t.Fatal("second drain stopped the listener at once")
	}
	eventually(t, "stopped on the first drain's clock", func() bool { return refused(e.ListenerAddrs()[0].String()) })
}

func TestFailedHealthCheckClosesOnEveryListener(t *testing.T) {
	t.Parallel()
	e := startLive(t, twoListeners())
	out := dialHTTP(t, e.ListenerAddrs()[0].String())
	in := dialHTTP(t, e.ListenerAddrs()[1].String())
	if out.get() || in.get() {
		t.Fatal("connection: close before the health check failed")
	}
	call(t, e, "POST", "/healthcheck/fail")
	if !out.get() || !in.get() {
		t.Error("a failed health check must put connection: close on every listener")
	}
	call(t, e, "POST", "/healthcheck/ok")
	if dialHTTP(t, e.ListenerAddrs()[0].String()).get() {
		t.Error("connection: close after /healthcheck/ok")
	}
	if refused(e.ListenerAddrs()[0].String()) {
		t.Error("a failed health check stopped a listener")
	}
}
