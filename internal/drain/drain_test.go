package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
	"github.com/proxy-supervisor/proxy-supervisor/internal/proctest"
)

// fakeAdmin is an admin API whose answers the test sets. With silent it
// accepts every call and never answers, as an Envoy whose admin loop hangs.
type fakeAdmin struct {
	mu        sync.Mutex
	conns     int // busy ones
	idle      int // idle keep-alives, besides
	refused   bool
	silent    bool
	failPosts int // /drain_listeners fails this many times first
	posts     []string
	excluded  []uint16
}

func (a *fakeAdmin) Post(ctx context.Context, path string, flags ...string) error {
	a.mu.Lock()
	silent := a.silent
	a.posts = append(a.posts, path)
	fail := path == "/drain_listeners" && a.failPosts > 0
	if fail {
		a.failPosts--
	}
	a.mu.Unlock()
	if silent {
		<-ctx.Done()
		return ctx.Err()
	}
	if fail {
		return errors.New("busy")
	}
	return nil
}

func (a *fakeAdmin) Connections(ctx context.Context, exclude []uint16) (envoy.Connections, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.excluded = exclude
	switch {
	case a.silent:
		a.mu.Unlock()
		<-ctx.Done()
		a.mu.Lock()
		return envoy.Connections{}, ctx.Err()
	case a.refused:
		return envoy.Connections{}, syscall.ECONNREFUSED
	}
	return envoy.Connections{Active: a.conns + a.idle, Busy: a.conns}, nil
}

func (a *fakeAdmin) ListenerPorts(ctx context.Context) ([]uint16, error) {
	a.mu.Lock()
	silent := a.silent
	a.mu.Unlock()
	if silent {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return []uint16{15006}, nil
}

func (a *fakeAdmin) set(fn func(a *fakeAdmin)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn(a)
}

// fakeScanner lists the app's listening ports the test sets.
type fakeScanner struct {
	mu    sync.Mutex
	ports []uint16
}

func (s *fakeScanner) Listening() ([]portwatch.Socket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []portwatch.Socket
	for _, p := range s.ports {
		out = append(out, portwatch.Socket{Addr: netip.AddrPortFrom(netip.IPv4Unspecified(), p), UID: 1000})
	}
	return out, nil
}

func (s *fakeScanner) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ports = nil
}

// fakeClock moves only when the test says so.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func config(a *fakeAdmin, s *fakeScanner, clock *fakeClock) Config {
	c := Config{
		Admin:   a,
		Scanner: s,
		Owner:   portwatch.Owner{AdminPort: 15000, HealthPort: 15022, ProxyUID: -1},
		Min:     5 * time.Second,
		Timeout: 20 * time.Second,
		Call:    ChooseCall(envoy.Version{Major: 1, Minor: 36}, true, true),
		Tick:    time.Millisecond,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if clock != nil {
		c.Now = clock.Now
	}
	return c
}

// start runs a drain in the background and returns its result's channel.
func start(cfg Config, settled <-chan struct{}) <-chan Result {
	out := make(chan Result, 1)
	go func() { out <- Run(cfg, nil, settled) }()
	return out
}

func within(t *testing.T, ch <-chan Result, d time.Duration) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("the drain did not end within %v", d)
		return Result{}
	}
}

// posted waits until the drain has posted n times: it has read its clock
// and started.
func (a *fakeAdmin) posted(t *testing.T, n int) {
	t.Helper()
	proctest.Eventually(t, 5*time.Second, fmt.Sprintf("%d admin posts", n), func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.posts) >= n
	})
}

// notEnded fails the test if the drain has ended.
func notEnded(t *testing.T, ch <-chan Result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("ended early: %s", r.End)
	default:
	}
}

func TestDrainedOnlyAfterMinAndWhenAppAndEnvoyAreDone(t *testing.T) {
	a, s, clock := &fakeAdmin{conns: 2}, &fakeScanner{ports: []uint16{8080}}, &fakeClock{now: time.Unix(0, 0)}
	res := start(config(a, s, clock), nil)
	a.posted(t, 1)
	time.Sleep(20 * time.Millisecond) // some ticks, while the app listens
	clock.advance(6 * time.Second)    // past Min
	s.close()
	time.Sleep(20 * time.Millisecond) // the app is gone; Envoy still holds 2
	notEnded(t, res)
	a.set(func(a *fakeAdmin) { a.conns, a.idle = 0, 3 }) // idle keep-alives do not hold it
	clock.advance(DefaultStatsEvery)                     // Envoy is asked again
	time.Sleep(20 * time.Millisecond)                    // the condition holds, not yet for the quiet period
	notEnded(t, res)
	clock.advance(DefaultQuiet)
	r := within(t, res, 5*time.Second)
	if r.End != Drained || !r.OK() {
		t.Fatalf("end %q", r.End)
	}
	if want := 6*time.Second + DefaultStatsEvery + DefaultQuiet; r.Took != want {
		t.Errorf("took %v by the drain's clock, want %v", r.Took, want)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.posts) == 0 || a.posts[0] != "/drain_listeners" {
		t.Errorf("posts %v; want /drain_listeners first", a.posts)
	}
	for _, p := range []uint16{15000, 15022, 15021, 15090} {
		found := false
		for _, e := range a.excluded {
			found = found || e == p
		}
		if !found {
			t.Errorf("port %d's connections hold the drain (excluded %v)", p, a.excluded)
		}
	}
}

func TestDrainWaitsForMinThoughAllIsDone(t *testing.T) {
	a, s, clock := &fakeAdmin{}, &fakeScanner{}, &fakeClock{now: time.Unix(0, 0)}
	res := start(config(a, s, clock), nil)
	a.posted(t, 1)
	time.Sleep(20 * time.Millisecond)
	notEnded(t, res)
	clock.advance(5 * time.Second) // the condition has held since the start
	if r := within(t, res, 5*time.Second); r.End != Drained {
		t.Fatalf("end %q", r.End)
	}
}

func TestDrainTimesOutWhileTheAppListens(t *testing.T) {
	a, s, clock := &fakeAdmin{}, &fakeScanner{ports: []uint16{8080}}, &fakeClock{now: time.Unix(0, 0)}
	res := start(config(a, s, clock), nil)
	a.posted(t, 1)
	clock.advance(19 * time.Second)
	time.Sleep(20 * time.Millisecond)
	notEnded(t, res)
	clock.advance(time.Second)
	r := within(t, res, 5*time.Second)
	if r.End != TimedOut || r.OK() {
		t.Fatalf("end %q", r.End)
	}
}

func TestRefusingAdminHasNoConnections(t *testing.T) {
	a, s := &fakeAdmin{refused: true, conns: 7}, &fakeScanner{}
	cfg := config(a, s, nil)
	cfg.Min = 0
	if r := within(t, start(cfg, nil), 5*time.Second); r.End != Drained {
		t.Fatalf("end %q", r.End)
	}
}

func TestSettledPeersEndTheDrainAtOnce(t *testing.T) {
	a, s := &fakeAdmin{}, &fakeScanner{ports: []uint16{8080}}
	settled := make(chan struct{})
	res := start(config(a, s, nil), settled)
	close(settled)
	if r := within(t, res, 5*time.Second); r.End != PeersCompleted || !r.OK() {
		t.Fatalf("end %q", r.End)
	}
}

// A settled verdict does not end the drain while another peer still runs
// under exec: under Never one peer's failure settles it while another may
// still be uploading through the proxy.
func TestSettledPeersWaitForARunningPeer(t *testing.T) {
	a, s := &fakeAdmin{}, &fakeScanner{ports: []uint16{8080}}
	var running atomic.Int32
	running.Store(1)
	cfg := config(a, s, nil)
	cfg.Running = func() int { return int(running.Load()) }
	settled := make(chan struct{})
	res := start(cfg, settled)
	close(settled)
	a.posted(t, 1)
	time.Sleep(50 * time.Millisecond) // ticks with the verdict settled and the peer running
	notEnded(t, res)
	running.Store(0)
	if r := within(t, res, 5*time.Second); r.End != PeersCompleted {
		t.Fatalf("end %q", r.End)
	}
}

func TestDrainListenersIsRetriedUntilAccepted(t *testing.T) {
	a, s := &fakeAdmin{failPosts: 2, conns: 1}, &fakeScanner{}
	cfg := config(a, s, nil)
	cfg.Progress = 5 * time.Millisecond
	res := start(cfg, nil)
	a.posted(t, 3)
	time.Sleep(50 * time.Millisecond) // further progress periods
	a.mu.Lock()
	n := len(a.posts)
	a.mu.Unlock()
	if n != 3 {
		t.Errorf("/drain_listeners posted %d times; want 3 (two failures, then once accepted)", n)
	}
	notEnded(t, res)
}

// An admin API that accepts and never answers must not carry the drain
// past its bound: each call is cut at the drain's deadline. (Each tick once
// made two 500 ms calls before it looked at the deadline, and a 3.6 s bound
// ended after 4.5 s.)
func TestSilentAdminDoesNotOverrunTheBound(t *testing.T) {
	for _, timeout := range []time.Duration{300 * time.Millisecond, 1100 * time.Millisecond} {
		a, s := &fakeAdmin{silent: true}, &fakeScanner{}
		cfg := config(a, s, nil)
		cfg.Min, cfg.Timeout = 0, timeout
		began := time.Now()
		r := within(t, start(cfg, nil), timeout+5*time.Second)
		took := time.Since(began)
		if r.End != TimedOut {
			t.Fatalf("end %q", r.End)
		}
		if over := took - timeout; over > 50*time.Millisecond {
			t.Errorf("a %v drain took %v: %v past its bound", timeout, took, over)
		}
	}
}

// A connection that opens within the quiet period (the app's upload, just
// after it closed its listener) holds the drain again, and the quiet period
// starts over once it is done.
func TestQuietPeriodSeesALateConnection(t *testing.T) {
	a, s, clock := &fakeAdmin{}, &fakeScanner{ports: []uint16{8080}}, &fakeClock{now: time.Unix(0, 0)}
	cfg := config(a, s, clock)
	cfg.Min = 0
	res := start(cfg, nil)
	a.posted(t, 1)
	s.close()
	time.Sleep(20 * time.Millisecond)
	clock.advance(DefaultQuiet / 2)
	a.set(func(a *fakeAdmin) { a.conns = 1 }) // the upload
	clock.advance(DefaultStatsEvery)
	time.Sleep(20 * time.Millisecond)
	clock.advance(time.Second) // well past the first quiet period
	time.Sleep(20 * time.Millisecond)
	notEnded(t, res)
	a.set(func(a *fakeAdmin) { a.conns = 0 })
	clock.advance(DefaultStatsEvery)
	time.Sleep(20 * time.Millisecond)
	notEnded(t, res)
	clock.advance(DefaultQuiet)
	if r := within(t, res, 5*time.Second); r.End != Drained {
		t.Fatalf("end %q", r.End)
	}
}

// A peer still running under exec holds the drain, past Min, until it has
// ended; and no longer than the bound.
func TestRunningPeerHoldsTheDrain(t *testing.T) {
	var running atomic.Int32
	running.Store(1)
	a, s, clock := &fakeAdmin{}, &fakeScanner{}, &fakeClock{now: time.Unix(0, 0)}
	cfg := config(a, s, clock)
	cfg.Running = func() int { return int(running.Load()) }
	res := start(cfg, nil)
	a.posted(t, 1)
	clock.advance(10 * time.Second) // past Min, nothing listens, no connection
	time.Sleep(20 * time.Millisecond)
	notEnded(t, res)
	running.Store(0)
	time.Sleep(20 * time.Millisecond)
	clock.advance(DefaultQuiet)
	if r := within(t, res, 5*time.Second); r.End != Drained {
		t.Fatalf("end %q", r.End)
	}

	running.Store(1)
	a, clock = &fakeAdmin{}, &fakeClock{now: time.Unix(0, 0)}
	cfg = config(a, s, clock)
	cfg.Running = func() int { return int(running.Load()) }
	res = start(cfg, nil)
	a.posted(t, 1)
	clock.advance(cfg.Timeout)
	if r := within(t, res, 5*time.Second); r.End != TimedOut {
		t.Fatalf("a peer that never ends: end %q, want the bound", r.End)
	}
}

// A re-check (SIGTERM after a preStop's drain ended) does not drain the
// listeners again and ignores Min, but waits for busy connections within
// its bound.
func TestRecheckWaitsForConnectionsOnly(t *testing.T) {
	a, s, clock := &fakeAdmin{conns: 1}, &fakeScanner{}, &fakeClock{now: time.Unix(0, 0)}
	cfg := config(a, s, clock)
	cfg.Recheck = true
	res := start(cfg, nil)
	time.Sleep(20 * time.Millisecond)
	notEnded(t, res)
	a.set(func(a *fakeAdmin) { a.conns = 0 })
	clock.advance(DefaultStatsEvery)
	time.Sleep(20 * time.Millisecond)
	clock.advance(DefaultQuiet)
	r := within(t, res, 5*time.Second)
	if r.End != Drained || r.Took >= cfg.Min {
		t.Fatalf("end %q after %v; want drained, without Min", r.End, r.Took)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.posts) != 0 {
		t.Errorf("a re-check posted %v", a.posts)
	}
}

// A re-check whose condition holds at its first check ends at once: the
// preStop's drain held the quiet period already, and a second one would
// make every deletion wait it twice (a kubelet's SIGTERM follows the hook).
func TestRecheckThatHoldsAtOnceHasNoQuietPeriod(t *testing.T) {
	a, s, clock := &fakeAdmin{}, &fakeScanner{}, &fakeClock{now: time.Unix(0, 0)}
	cfg := config(a, s, clock)
	cfg.Recheck = true
	r := within(t, start(cfg, nil), 5*time.Second)
	if r.End != Drained || r.Took != 0 {
		t.Fatalf("end %q after %v on the fake clock; want drained at once", r.End, r.Took)
	}
}
