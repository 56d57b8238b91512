package envoy

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

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/fakeenvoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

func startEnvoy(t *testing.T, o fakeenvoy.Options) (*fakeenvoy.Envoy, *Admin) {
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

// track runs a tracker of a until the test ends. Once ready it polls every
// 50 ms rather than every second, so that the tests do not wait on the clock.
func track(t *testing.T, a *Admin, strict bool) *Tracker {
	tr, _ := trackDone(t, a, strict)
	return tr
}

// trackDone is track, with a channel closed when the tracker's Run returns.
func trackDone(t *testing.T, a *Admin, strict bool) (*Tracker, <-chan struct{}) {
	t.Helper()
	tr := NewTracker(a, TrackerConfig{Strict: strict, ReadyEvery: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return tr, done
}

// waitStatus waits (bounded) for a status that satisfies ok, by subscription.
func waitStatus(t *testing.T, tr *Tracker, d time.Duration, ok func(Status) bool) Status {
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
			waitStatus(t, tr, 5*time.Second, func(s Status) bool { return strings.HasPrefix(s.Reason, tt.before) && !s.Ready })
			st := waitStatus(t, tr, 10*time.Second, func(s Status) bool { return s.Ready })
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
	waitStatus(t, tr, 5*time.Second, func(s Status) bool { return s.Ready })
	e.Close()
	st := waitStatus(t, tr, 3*time.Second, func(s Status) bool { return !s.Ready })
	if !st.Down {
		t.Fatalf("a closed admin port should read as down: %+v", st)
	}
}

// A failed health check reads as DRAINING and a silent admin API as not
// answering. The last answer moves with every answer, a 503 included, and
// stops when the admin API falls silent: what liveness needs to see a hung
// Envoy.
func TestTrackerHealthcheckFailAndSilence(t *testing.T) {
	e, a := startEnvoy(t, fakeenvoy.Options{})
	// A silent admin API's every request is cut at its Timeout, and its
	// connection with it: the dials count the requests.
	a.Timeout = 250 * time.Millisecond
	var dials atomic.Int32
	dial := a.client.Dial
	a.client.Dial = func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx)
	}
	tr := track(t, a, false)
	waitStatus(t, tr, 5*time.Second, func(s Status) bool { return s.Ready })
	if err := a.Post(context.Background(), "/healthcheck/fail"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, tr, 3*time.Second, func(s Status) bool { return s.Reason == "DRAINING" })
	before := time.Now()
	proctest.Eventually(t, 3*time.Second, "a 503 DRAINING is an answer: the last answer moves", func() bool {
		return tr.LastAnswer().After(before)
	})
	if err := a.Post(context.Background(), "/healthcheck/ok"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, tr, 3*time.Second, func(s Status) bool { return s.Ready })
	e.SetSilent(true)
	waitStatus(t, tr, 4*time.Second, func(s Status) bool { return strings.HasPrefix(s.Reason, "admin API does not answer") })
	last := tr.LastAnswer()
	polls := dials.Load()
	proctest.Eventually(t, 5*time.Second, "a request to the silent admin API cut, and another sent", func() bool {
		return dials.Load() >= polls+2
	})
	if got := tr.LastAnswer(); !got.Equal(last) {
		t.Fatalf("the last answer moved from %v to %v while the admin API was silent", last, got)
	}
}

// A slow Envoy is alive: every answer later than the poll's bound reads
// not ready, and still moves the last answer, which liveness reads. (Only
// answers within the bound counted, so a busy Envoy read as hung.)
func TestTrackerSlowIsNotSilent(t *testing.T) {
	e, a := startEnvoy(t, fakeenvoy.Options{})
	tr := track(t, a, false) // polls cut at 45 ms once ready
	waitStatus(t, tr, 5*time.Second, func(s Status) bool { return s.Ready })
	e.SetSlow(150 * time.Millisecond)
	waitStatus(t, tr, 3*time.Second, func(s Status) bool {
		return !s.Ready && strings.HasPrefix(s.Reason, "admin API does not answer")
	})
	for range 3 {
		last := tr.LastAnswer()
		proctest.Eventually(t, 2*time.Second, "a late answer moves the last answer", func() bool {
			return tr.LastAnswer().After(last)
		})
	}
	if st, _ := tr.Status(); st.Ready {
		t.Fatalf("ready on answers later than the poll's bound: %+v", st)
	}
	e.SetSlow(0)
	waitStatus(t, tr, 3*time.Second, func(s Status) bool { return s.Ready })
}

func TestTrackerGoneIsFinal(t *testing.T) {
	_, a := startEnvoy(t, fakeenvoy.Options{})
	tr, done := trackDone(t, a, false)
	waitStatus(t, tr, 5*time.Second, func(s Status) bool { return s.Ready })
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
	waitStatus(t, tr, 5*time.Second, func(s Status) bool { return s.Reason == "INITIALIZING" || s.Reason == "PRE_INITIALIZING" })
	e.SetState(fakeenvoy.Live)
	st := waitStatus(t, tr, 5*time.Second, func(s Status) bool { return s.Ready })
	if st.Reason != "LIVE" {
		t.Fatal(st)
	}
}

func TestCountConnections(t *testing.T) {
	stats := map[string]uint64{
		"listener.0.0.0.0_15006.downstream_cx_active":          3,
		"listener.0.0.0.0_15006.worker_0.downstream_cx_active": 2,
		"listener.0.0.0.0_15006.worker_1.downstream_cx_active": 1,
		"listener.0.0.0.0_15001.downstream_cx_active":          4,
		"listener.[__]_8443.downstream_cx_active":              1,
		"listener.admin.downstream_cx_active":                  7,
		"listener.admin.main_thread.downstream_cx_active":      7,
		"listener.0.0.0.0_15090.downstream_cx_active":          5,
		"listener.0.0.0.0_15021.downstream_cx_active":          6,
		"listener.envoy_internal_foo.downstream_cx_active":     9,
		"listener.virtualInbound.downstream_cx_active":         2,
		"cluster.x.upstream_cx_active":                         8,
		"cluster.x.upstream_rq_active":                         8,
		// Of 15006's 3: one request in flight on two HTTP connections.
		"http.inbound_0.0.0.0_8080.downstream_cx_active": 2,
		"http.inbound_0.0.0.0_8080.downstream_rq_active": 1,
		// HTTP/2: three streams on one connection is busy, not -2 idle.
		"http.outbound_0.0.0.0_80.downstream_cx_active": 1,
		"http.outbound_0.0.0.0_80.downstream_rq_active": 3,
		// Excluded listeners' HCMs: their idle connections were never counted.
		"http.admin.downstream_cx_active": 7,
		"http.stats.downstream_cx_active": 5,
		"http.agent.downstream_cx_active": 6,
		"http.agent.downstream_rq_active": 1,
	}
	got := countConnections(stats, []uint16{15090, 15021})
	if want := (Connections{Active: 3 + 4 + 1 + 2, Busy: 3 + 4 + 1 + 2 - 1}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// An HCM on an excluded listener that is not recognized by its name
	// must not hide a busy connection: a request in flight is busy.
	got = countConnections(map[string]uint64{
		"listener.0.0.0.0_9000.downstream_cx_active":     1,
		"http.mystats.downstream_cx_active":              3,
		"http.inbound_0.0.0.0_9000.downstream_cx_active": 1,
		"http.inbound_0.0.0.0_9000.downstream_rq_active": 1,
	}, []uint16{15090})
	if got.Busy != 1 {
		t.Fatalf("a request in flight counted as %+v", got)
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
	waitStatus(t, tr, 5*time.Second, func(s Status) bool { return s.Ready })
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
	waitConnections := func(want Connections) {
		t.Helper()
		var c Connections
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
	waitConnections(Connections{Active: 6, Busy: 3})
	// An upload under way: its headers are in, its body is not.
	if _, err := io.WriteString(conns[0], "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	waitConnections(Connections{Active: 6, Busy: 4})
	// Its end leaves a keep-alive connection, idle.
	if _, err := io.WriteString(conns[0], "defghij"); err != nil {
		t.Fatal(err)
	}
	waitConnections(Connections{Active: 6, Busy: 3})
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
	if err == nil || Refused(err) {
		t.Fatalf("want a timeout, got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("call took %v despite its timeout", d)
	}
}

func TestBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := adminFor("http://" + ln.Addr().String())
	if ok, err := a.Bound(context.Background()); !ok || err != nil {
		t.Fatalf("listening port: %v %v", ok, err)
	}
	ln.Close()
	if ok, err := a.Bound(context.Background()); ok || err != nil {
		t.Fatalf("closed port: %v %v", ok, err)
	}
	// Bound but silent (the admin loop not running yet) counts as bound.
	e, a := startEnvoy(t, fakeenvoy.Options{SilentFor: time.Hour})
	<-e.Bound()
	if ok, err := a.Bound(context.Background()); !ok || err != nil {
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
	tr := NewTracker(a, TrackerConfig{ReadyEvery: 50 * time.Millisecond, Also: u.Check})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	st := waitStatus(t, tr, 5*time.Second, func(s Status) bool { return strings.Contains(s.Reason, "answered 503") })
	if st.Ready || !strings.Contains(st.Reason, "DNS not ready") {
		t.Fatalf("Envoy LIVE, the URL 503: %+v; want not ready with the URL's reason", st)
	}
	ok.Store(true)
	waitStatus(t, tr, 5*time.Second, func(s Status) bool { return s.Ready })
	hang.Store(true)
	start := time.Now()
	waitStatus(t, tr, 5*time.Second, func(s Status) bool { return !s.Ready })
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a hanging readiness URL took %v to withdraw readiness", d)
	}
}
