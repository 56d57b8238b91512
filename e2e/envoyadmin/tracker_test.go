package envoyadmin

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/e2e/fakeenvoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

func startEnvoy(t *testing.T, o fakeenvoy.Options) (*fakeenvoy.Envoy, *envoy.Admin) {
	t.Helper()
	if o.AdminAddr == "" {
		o.AdminAddr = "127.0.0.1:0"
	}
	e, err := fakeenvoy.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	a, err := adminFor("http://" + e.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	return e, a
}

// adminFor is envoy.NewAdmin of a URL as the flags take it.
func adminFor(raw string) (*envoy.Admin, error) {
	u, err := http1.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return envoy.NewAdmin(u), nil
}

// readyFor is envoy.NewReadyURL of a URL as the flags take it.
func readyFor(raw string) (*envoy.ReadyURL, error) {
	u, err := http1.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return envoy.NewReadyURL(u), nil
}

// track runs a tracker of a until the test ends. Once ready it polls every
// 50 ms rather than every second, so that the tests do not wait on the clock.
func track(t *testing.T, a *envoy.Admin, strict bool) *envoy.Tracker {
	tr, _ := trackDone(t, a, strict)
	return tr
}

// trackDone is track, with a channel closed when the tracker's Run returns.
func trackDone(t *testing.T, a *envoy.Admin, strict bool) (*envoy.Tracker, <-chan struct{}) {
	t.Helper()
	tr := envoy.NewTracker(a, envoy.TrackerConfig{Strict: strict, ReadyEvery: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return tr, done
}

// countingProxy forwards the connections it accepts to addr and counts them.
func countingProxy(t *testing.T, addr string) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.Close() }()
				io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String(), &n
}

// waitStatus waits (bounded) for a status that satisfies ok, by subscription.
func waitStatus(t *testing.T, tr *envoy.Tracker, d time.Duration, ok func(envoy.Status) bool) envoy.Status {
	t.Helper()
	timeout := time.After(d)
	for {
		st, changed := tr.Status()
		if ok(st) {
			return st
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("status never matched within %v; last %+v", d, st)
		}
	}
}

func TestTrackerPhases(t *testing.T) {
	tests := []struct {
		name   string
		opts   fakeenvoy.Options
		before string // the reason seen before LIVE
	}{
		{"not bound", fakeenvoy.Options{BindDelay: 300 * time.Millisecond}, "admin API refuses connections"},
		{"bound but silent", fakeenvoy.Options{SilentFor: 1500 * time.Millisecond}, "admin API does not answer"},
		{"pre-initializing", fakeenvoy.Options{InitDelay: 600 * time.Millisecond}, "PRE_INITIALIZING"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, a := startEnvoy(t, tt.opts)
			tr := track(t, a, false)
			waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return strings.HasPrefix(s.Reason, tt.before) && !s.Ready })
			st := waitStatus(t, tr, 10*time.Second, func(s envoy.Status) bool { return s.Ready })
			if st.Reason != "LIVE" {
				t.Fatalf("ready with reason %q", st.Reason)
			}
		})
	}
}

// 503 -> 200 -> 503: a success is never remembered.
func TestTrackerNoticesDeath(t *testing.T) {
	e, a := startEnvoy(t, fakeenvoy.Options{InitDelay: 100 * time.Millisecond})
	tr := track(t, a, false)
	waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return s.Ready })
	e.Close()
	st := waitStatus(t, tr, 3*time.Second, func(s envoy.Status) bool { return !s.Ready })
	if !st.Down {
		t.Fatalf("a closed admin port should read as down: %+v", st)
	}
}

// A failed health check reads as DRAINING and a silent admin API as not
// answering. The last answer moves with every answer, a 503 included, and
// stops when the admin API falls silent: what liveness needs to see a hung
// Envoy.
func TestTrackerHealthcheckFailAndSilence(t *testing.T) {
	e, _ := startEnvoy(t, fakeenvoy.Options{})
	// A silent admin API's every request is cut at its Timeout, and its
	// connection with it: the connections counted on the way count the
	// requests.
	via, dials := countingProxy(t, e.AdminAddr())
	a, err := adminFor("http://" + via)
	if err != nil {
		t.Fatal(err)
	}
	a.Timeout = 250 * time.Millisecond
	tr := track(t, a, false)
	waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return s.Ready })
	if err := a.Post(context.Background(), "/healthcheck/fail"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, tr, 3*time.Second, func(s envoy.Status) bool { return s.Reason == "DRAINING" })
	before := time.Now()
	proctest.Eventually(t, 3*time.Second, "a 503 DRAINING is an answer: the last answer moves", func() bool {
		return tr.LastAnswer().After(before)
	})
	if err := a.Post(context.Background(), "/healthcheck/ok"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, tr, 3*time.Second, func(s envoy.Status) bool { return s.Ready })
	e.SetSilent(true)
	waitStatus(t, tr, 4*time.Second, func(s envoy.Status) bool { return strings.HasPrefix(s.Reason, "admin API does not answer") })
	last := tr.LastAnswer()
	polls := dials.Load()
	proctest.Eventually(t, 5*time.Second, "a request to the silent admin API cut, and another sent", func() bool {
		return dials.Load() >= polls+2
	})
	if got := tr.LastAnswer(); !got.Equal(last) {
		t.Fatalf("the last answer moved from %v to %v while the admin API was silent", last, got)
	}
}

// A slow Envoy is alive and, once ready, stays ready: every answer later
// than the poll's bound still moves the last answer, which liveness reads,
// and a late LIVE is an answer, not a withdrawal (the hold, envoy.Tracker).
// (Only answers within the bound counted once, so a busy Envoy read as
// hung; and each late poll withdrew readiness, which left a loaded node's
// Service without a ready endpoint.)
func TestTrackerSlowIsNotSilent(t *testing.T) {
	e, a := startEnvoy(t, fakeenvoy.Options{})
	tr := track(t, a, false) // polls cut at 45 ms once ready
	waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return s.Ready })
	e.SetSlow(150 * time.Millisecond)
	for range 3 {
		last := tr.LastAnswer()
		proctest.Eventually(t, 2*time.Second, "a late answer moves the last answer", func() bool {
			return tr.LastAnswer().After(last)
		})
		if st, _ := tr.Status(); !st.Ready {
			t.Fatalf("a ready Envoy whose answers come late turned unready: %+v", st)
		}
	}
	e.SetSlow(0)
	waitStatus(t, tr, 3*time.Second, func(s envoy.Status) bool { return s.Ready })
}

func TestTrackerGoneIsFinal(t *testing.T) {
	_, a := startEnvoy(t, fakeenvoy.Options{})
	tr, done := trackDone(t, a, false)
	waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return s.Ready })
	tr.Gone("proxy exited")
	// Run ends at its next poll once the proxy is gone; no later poll can
	// make it ready again.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the tracker still polls after Gone")
	}
	if st, _ := tr.Status(); st.Ready || st.Reason != "proxy exited" {
		t.Fatalf("after Gone: %+v", st)
	}
}

func TestStrictReadiness(t *testing.T) {
	e, a := startEnvoy(t, fakeenvoy.Options{StayInitializing: true})
	tr := track(t, a, true)
	waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return s.Reason == "INITIALIZING" || s.Reason == "PRE_INITIALIZING" })
	e.SetState(fakeenvoy.Live)
	st := waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return s.Ready })
	if st.Reason != "LIVE" {
		t.Fatal(st)
	}
}

// Connections on the fake Envoy's real sockets: the TCP proxy's are busy,
// the HTTP listener's only while a request is in flight.
func TestConnectionsFromRealConnections(t *testing.T) {
	e, a := startEnvoy(t, fakeenvoy.Options{Listeners: []fakeenvoy.Listener{
		{Name: "in", Addr: "127.0.0.1:0", Inbound: true},
		{Name: "tcp", Addr: "127.0.0.1:0", TCP: true},
	}})
	tr := track(t, a, false)
	waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return s.Ready })
	var conns []net.Conn
	for _, ap := range e.ListenerAddrs() {
		for i := 0; i < 3; i++ {
			c, err := net.Dial("tcp", ap.String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
	}
	waitConnections := func(want envoy.Connections) {
		t.Helper()
		var c envoy.Connections
		if !proctest.Until(5*time.Second, func() bool {
			var err error
			if c, err = a.Connections(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			return c == want
		}) {
			t.Fatalf("connections %+v, want %+v", c, want)
		}
	}
	// Three HTTP connections with no request yet, three TCP ones.
	waitConnections(envoy.Connections{Active: 6, Busy: 3})
	// An upload under way: its headers are in, its body is not.
	if _, err := io.WriteString(conns[0], "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	waitConnections(envoy.Connections{Active: 6, Busy: 4})
	// Its end leaves a keep-alive connection, idle.
	if _, err := io.WriteString(conns[0], "defghij"); err != nil {
		t.Fatal(err)
	}
	waitConnections(envoy.Connections{Active: 6, Busy: 3})
	for _, c := range conns {
		c.Close()
	}
	ports, err := a.ListenerPorts(context.Background())
	if err != nil || len(ports) != 2 {
		t.Fatalf("listener ports %v %v", ports, err)
	}
}

func TestAdminTimesOutOnSilence(t *testing.T) {
	e, a := startEnvoy(t, fakeenvoy.Options{SilentFor: time.Hour})
	<-e.Bound() // accepting, and never answering
	a.Timeout = 200 * time.Millisecond
	start := time.Now()
	_, _, err := a.ServerState(context.Background())
	if err == nil || envoy.Refused(err) {
		t.Fatalf("want a timeout, got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("call took %v despite its timeout", d)
	}
}

// Bound but silent (the admin loop not running yet) counts as bound.
func TestBoundWhileSilent(t *testing.T) {
	e, a := startEnvoy(t, fakeenvoy.Options{SilentFor: time.Hour})
	<-e.Bound()
	if ok, err := a.Listening(context.Background()); !ok || err != nil {
		t.Fatalf("silent admin: %v %v", ok, err)
	}
}

// With a readiness URL beside Envoy's, ready needs both: Envoy LIVE and the
// URL's 200. A URL that hangs is bounded by the poll.
func TestTrackerAlsoAsksTheReadyURL(t *testing.T) {
	var ok, hang atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			<-r.Context().Done()
			return
		}
		if !ok.Load() {
			http.Error(w, "Envoy proxy is NOT ready: DNS not ready", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	u, err := readyFor(srv.URL + "/healthz/ready")
	if err != nil {
		t.Fatal(err)
	}
	_, a := startEnvoy(t, fakeenvoy.Options{})
	tr := envoy.NewTracker(a, envoy.TrackerConfig{ReadyEvery: 50 * time.Millisecond, ExtraReady: u.Check})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	st := waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return strings.Contains(s.Reason, "answered 503") })
	if st.Ready || !strings.Contains(st.Reason, "DNS not ready") {
		t.Fatalf("Envoy LIVE, the URL 503: %+v; want not ready with the URL's reason", st)
	}
	ok.Store(true)
	waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return s.Ready })
	hang.Store(true)
	start := time.Now()
	waitStatus(t, tr, 5*time.Second, func(s envoy.Status) bool { return !s.Ready })
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a hanging readiness URL took %v to withdraw readiness", d)
	}
}
