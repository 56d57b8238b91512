package fakeenvoy

import (
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestRefusedWhileUnbound(t *testing.T) {
	t.Parallel()
	e := start(t, Options{BindDelay: 400 * time.Millisecond})
	if _, port, _ := net.SplitHostPort(e.AdminAddr()); port == "0" {
		t.Fatalf("admin port not resolved at Start: %s", e.AdminAddr())
	}
	if !refused(e.AdminAddr()) {
		t.Fatal("connect to an unbound admin port succeeded")
	}
	eventually(t, "admin answers", func() bool {
		a, err := tryCall(e, "GET", "/ready", time.Second)
		return err == nil && a.code == 200
	})
}

func TestSilentAcceptsButNeverAnswers(t *testing.T) {
	t.Parallel()
	e := start(t, Options{SilentFor: 1500 * time.Millisecond})
	eventually(t, "admin bound", func() bool { return !refused(e.AdminAddr()) })
	_, err := tryCall(e, "GET", "/ready", 150*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("request during silence: %v, want a timeout", err)
	}
	// A request held through the silence is answered once the loop runs, which may be
	// an instant before initialisation completes, as in Envoy.
	a, err := tryCall(e, "GET", "/server_info", 5*time.Second)
	if err != nil || a.code != 200 {
		t.Fatalf("held request: %v %d %q", err, a.code, a.body)
	}
	eventually(t, "LIVE", func() bool { return call(t, e, "GET", "/ready").body == "LIVE\n" })
}

func TestSetSilent(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	e.SetSilent(true)
	if _, err := tryCall(e, "GET", "/ready", 150*time.Millisecond); err == nil {
		t.Fatal("answered while silent")
	}
	done := make(chan answer, 1)
	before := e.adminCx.total[0].value.Load()
	go func() {
		a, _ := tryCall(e, "GET", "/server_info", 5*time.Second)
		done <- a
	}()
	// The admin listener took the connection, and the silence holds its
	// request.
	eventually(t, "the request held", func() bool { return e.adminCx.total[0].value.Load() > before })
	e.SetSilent(false)
	if a := <-done; a.code != 200 {
		t.Fatalf("held request after SetSilent(false): %d", a.code)
	}
	if a := call(t, e, "GET", "/ready"); a.code != 200 {
		t.Fatalf("/ready: %d", a.code)
	}
}

// A busy main thread, from the next GET /ready on, holds that request and
// every admin request after it until its spell ends, and then answers them;
// Busy returns at the end, saying how many it held.
func TestBusy(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	const spell = 800 * time.Millisecond
	held := make(chan int, 1)
	armed := time.Now()
	go func() { held <- e.Busy(spell) }()
	// Until a /ready comes, nothing is busy; the spell begins with one.
	eventually(t, "the spell begins at a /ready", func() bool {
		_, err := tryCall(e, "GET", "/ready", 100*time.Millisecond)
		return err != nil
	})
	a, err := tryCall(e, "GET", "/server_info", 5*time.Second)
	if err != nil || a.code != 200 {
		t.Fatalf("/server_info during the spell: %v %d", err, a.code)
	}
	// The spell began after Busy was called, and held the request to its end.
	if d := time.Since(armed); d < spell {
		t.Errorf("/server_info answered %v after Busy(%v)", d, spell)
	}
	if n := <-held; n < 2 {
		t.Errorf("Busy held %d requests, want the /ready and the /server_info", n)
	}
	if a := call(t, e, "GET", "/ready"); a.code != 200 || a.body != "LIVE\n" {
		t.Fatalf("/ready after the spell: %d %q", a.code, a.body)
	}
}

func TestInitPhasesReachLive(t *testing.T) {
	t.Parallel()
	var onInit atomic.Value
	var e *Envoy
	e = start(t, Options{
		InitDelay: 600 * time.Millisecond,
		Listeners: []Listener{{Addr: "127.0.0.1:0"}},
		OnInit:    func() { onInit.Store(e.State()) },
	})
	listener := e.ListenerAddrs()[0].String()
	var seen []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		a, err := tryCall(e, "GET", "/ready", time.Second)
		if err != nil {
			continue
		}
		if len(seen) == 0 || seen[len(seen)-1] != a.body {
			seen = append(seen, a.body)
			if a.body != "LIVE\n" && a.code != 503 {
				t.Errorf("%q answered %d, want 503", a.body, a.code)
			}
			if a.body != "LIVE\n" && !refused(listener) {
				t.Errorf("data listener accepts while %q", a.body)
			}
		}
		if a.body == "LIVE\n" {
			break
		}
	}
	want := []string{"PRE_INITIALIZING\n", "INITIALIZING\n", "LIVE\n"}
	if !slices.Equal(seen, want) {
		t.Fatalf("states %q, want %q", seen, want)
	}
	select {
	case <-e.Initialized():
	default:
		t.Error("Initialized not closed at LIVE")
	}
	if got := onInit.Load(); got != Initializing {
		t.Errorf("OnInit ran while %v, want before LIVE", got)
	}
	if refused(listener) {
		t.Error("data listener refuses once LIVE")
	}
}

func TestStayInitializingUntilSetState(t *testing.T) {
	t.Parallel()
	calls := 0
	e := start(t, Options{StayInitializing: true, OnInit: func() { calls++ }})
	eventually(t, "INITIALIZING", func() bool { return e.State() == Initializing })
	time.Sleep(200 * time.Millisecond)
	if a := call(t, e, "GET", "/ready"); a.code != 503 || a.body != "INITIALIZING\n" {
		t.Fatalf("/ready: %d %q", a.code, a.body)
	}
	select {
	case <-e.Initialized():
		t.Fatal("Initialized before LIVE")
	default:
	}
	for _, s := range []State{Live, Draining, PreInitializing, Initializing, Live} {
		e.SetState(s)
		a := call(t, e, "GET", "/ready")
		if a.body != s.String()+"\n" {
			t.Errorf("SetState(%v): /ready %q", s, a.body)
		}
	}
	<-e.Initialized()
	if calls != 1 {
		t.Errorf("OnInit ran %d times, want once", calls)
	}
}

func TestSetStateTakesOverFromPhases(t *testing.T) {
	t.Parallel()
	e := start(t, Options{InitDelay: 300 * time.Millisecond})
	e.SetState(Initializing)
	time.Sleep(600 * time.Millisecond)
	if got := e.State(); got != Initializing {
		t.Fatalf("state %v after the init delay, want the fixture's INITIALIZING", got)
	}
}

func TestStateNames(t *testing.T) {
	for s, name := range map[State]string{Live: "LIVE", Draining: "DRAINING", PreInitializing: "PRE_INITIALIZING", Initializing: "INITIALIZING"} {
		if s.String() != name {
			t.Errorf("%d: %q", int(s), s.String())
		}
		if got, err := ParseState(name); err != nil || got != s {
			t.Errorf("ParseState(%q) = %v, %v", name, got, err)
		}
	}
	if _, err := ParseState("live"); err == nil {
		t.Error("ParseState is case-insensitive")
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	for name, opts := range map[string]Options{
		"bad admin":      {AdminAddr: "localhost:0"},
		"bad listener":   {AdminAddr: "127.0.0.1:0", Listeners: []Listener{{Addr: "nope"}}},
		"duplicate name": {AdminAddr: "127.0.0.1:0", Listeners: []Listener{{Name: "a", Addr: "127.0.0.1:0"}, {Name: "a", Addr: "127.0.0.1:0"}}},
		"bad strategy":   {AdminAddr: "127.0.0.1:0", DrainStrategy: "slow"},
	} {
		if e, err := Start(opts); err == nil {
			e.Close()
			t.Errorf("%s: Start succeeded", name)
		}
	}
	// A port that is already listening cannot be taken.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if e, err := Start(Options{AdminAddr: ln.Addr().String()}); err == nil {
		e.Close()
		t.Error("Start took a port in use")
	}
}

func TestBoundBeforeAnswering(t *testing.T) {
	t.Parallel()
	e := start(t, Options{BindDelay: 200 * time.Millisecond, SilentFor: time.Second})
	select {
	case <-e.Bound():
		t.Fatal("Bound before the bind delay")
	default:
	}
	select {
	case <-e.Bound():
	case <-time.After(3 * time.Second):
		t.Fatal("never bound")
	}
	if refused(e.AdminAddr()) {
		t.Error("Bound closed but the port refuses")
	}
	if _, err := tryCall(e, "GET", "/ready", 100*time.Millisecond); err == nil {
		t.Error("answered during SilentFor")
	}
}
