package fakeenvoy

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestStatsCountRealConnections(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{Listeners: []Listener{
		{Name: "ingress", Addr: "127.0.0.1:0", StatPrefix: "ingress_http"},
		{Name: "db", Addr: "127.0.0.1:0", TCP: true},
	}})
	http, db := e.ListenerAddrs()[0], e.ListenerAddrs()[1]
	var conns []net.Conn
	for range 3 {
		conns = append(conns, dialHTTP(t, http.String()).nc)
	}
	dbConn := dialHTTP(t, db.String()).nc
	ingress := fmt.Sprintf("listener.127.0.0.1_%d", http.Port())
	tcp := fmt.Sprintf("listener.127.0.0.1_%d", db.Port())

	eventually(t, "3+1 connections counted", func() bool { return e.ActiveConnections() == 4 })
	s := stats(t, e, "?filter=downstream_cx_active$")
	want := map[string]uint64{
		ingress + ".downstream_cx_active":                 3,
		ingress + ".worker_0.downstream_cx_active":        2,
		ingress + ".worker_1.downstream_cx_active":        1,
		"http.ingress_http.downstream_cx_active":          3,
		tcp + ".downstream_cx_active":                     1,
		tcp + ".worker_0.downstream_cx_active":            1,
		tcp + ".worker_1.downstream_cx_active":            0,
		"listener.admin.downstream_cx_active":             1, // this very request
		"listener.admin.main_thread.downstream_cx_active": 1,
		"http.admin.downstream_cx_active":                 1,
	}
	for name, v := range want {
		if got, ok := s[name]; !ok || got != v {
			t.Errorf("%s = %d (present %v), want %d", name, got, ok, v)
		}
	}
	if len(s) != len(want) {
		t.Errorf("unexpected downstream_cx_active stats: %v", s)
	}
	if _, ok := s["http.db.downstream_cx_active"]; ok {
		t.Error("a TCP listener has an http. duplicate")
	}

	conns[0].Close()
	conns[1].Close()
	dbConn.Close()
	eventually(t, "closes counted", func() bool {
		s := stats(t, e, "?filter=downstream_cx_")
		return s[ingress+".downstream_cx_active"] == 1 && s[tcp+".downstream_cx_active"] == 0 &&
			s[ingress+".worker_0.downstream_cx_active"]+s[ingress+".worker_1.downstream_cx_active"] == 1 &&
			s[ingress+".downstream_cx_total"] == 3 && s["http.ingress_http.downstream_cx_active"] == 1
	})
	if e.ActiveConnections() != 1 {
		t.Errorf("ActiveConnections %d, want 1", e.ActiveConnections())
	}
}

func TestStatsUsedOnly(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{Listeners: []Listener{
		{Name: "used", Addr: "127.0.0.1:0"},
		{Name: "idle", Addr: "127.0.0.1:0"},
	}})
	used, idle := e.ListenerAddrs()[0], e.ListenerAddrs()[1]
	usedName := fmt.Sprintf("listener.127.0.0.1_%d.downstream_cx_active", used.Port())
	idleName := fmt.Sprintf("listener.127.0.0.1_%d.downstream_cx_active", idle.Port())

	c := dialHTTP(t, used.String())
	c.get()
	c.nc.Close()
	eventually(t, "connection gone", func() bool { return e.ActiveConnections() == 0 })

	all := stats(t, e, "?filter=downstream_cx_active$")
	onlyUsed := stats(t, e, "?usedonly&filter=downstream_cx_active$")
	if v, ok := all[idleName]; !ok || v != 0 {
		t.Errorf("without usedonly %s should be 0, got %d (present %v)", idleName, v, ok)
	}
	if _, ok := onlyUsed[idleName]; ok {
		t.Errorf("usedonly lists the never-set %s", idleName)
	}
	if v, ok := onlyUsed[usedName]; !ok || v != 0 {
		t.Errorf("usedonly must list %s (set, back at 0): %d %v", usedName, v, ok)
	}
	// The value of usedonly does not matter, as in Envoy.
	if got := stats(t, e, "?usedonly=false&filter=downstream_cx_active$"); len(got) != len(onlyUsed) {
		t.Errorf("usedonly=false: %v", got)
	}
}

func TestStatsFilterFormatsAndErrors(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	tests := []struct {
		query string
		code  int
		body  string // exact, or a prefix when it ends with "…"
	}{
		{"?filter=^server%5C.live$", 200, "server.live: 1\n"},
		{"?filter=live$&format=json", 200, `{"stats":[{"name":"server.live","value":1}]}`},
		{"?filter=matches_nothing", 200, ""},
		{"?filter=matches_nothing&format=json", 200, `{"stats":[]}`},
		{"?filter=erver.liv", 200, "server.live: 1\n"}, // a partial match
		{"?filter=(", 400, "Invalid re2 regex"},
		{"?filter=a(?=b)", 400, "Invalid re2 regex"}, // lookahead is not RE2
		{"?format=yaml", 400, "usage: /stats?format=(html|active-html|json|prometheus|text)\n\n"},
		{"?type=Bogus", 400, "invalid &type= param"},
		{"?type=Counters&filter=^server", 200, ""},
		{"?type=Gauges&filter=^server.live$", 200, "server.live: 1\n"},
		{"?histogram_buckets=bogus", 400, "usage: /stats?histogram_buckets=(cumulative|disjoint|none)\n"},
		{"?format=&filter=^server.live$", 200, "server.live: 1\n"},
	}
	for _, tt := range tests {
		a := call(t, e, "GET", "/stats"+tt.query)
		if a.code != tt.code || a.body != tt.body {
			t.Errorf("/stats%s: %d %q, want %d %q", tt.query, a.code, a.body, tt.code, tt.body)
		}
	}
}

func TestStatsJSONMatchesText(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{Listeners: []Listener{{Addr: "127.0.0.1:0"}}})
	a := call(t, e, "GET", "/stats?format=json&filter=^(cluster_manager|listener_manager)")
	var doc struct {
		Stats []struct {
			Name  string
			Value uint64
		}
	}
	if err := json.Unmarshal([]byte(a.body), &doc); err != nil {
		t.Fatalf("%v: %s", err, a.body)
	}
	text := stats(t, e, "?filter=^(cluster_manager|listener_manager)")
	if len(doc.Stats) != len(text) || len(text) == 0 {
		t.Fatalf("json has %d stats, text %d", len(doc.Stats), len(text))
	}
	for i, s := range doc.Stats {
		if text[s.Name] != s.Value {
			t.Errorf("%s: json %d, text %d", s.Name, s.Value, text[s.Name])
		}
		if i > 0 && doc.Stats[i-1].Name >= s.Name {
			t.Errorf("not sorted at %s", s.Name)
		}
	}
}

func TestPilotAgentReadinessStats(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StayInitializing: true})
	eventually(t, "INITIALIZING", func() bool { return e.State() == Initializing })
	const filter = "?filter=^(server%5C.state|listener_manager%5C.workers_started|cluster_manager%5C.cds%5C.update_success|listener_manager%5C.lds%5C.update_success)$"
	before := stats(t, e, filter)
	for _, name := range []string{"listener_manager.workers_started", "cluster_manager.cds.update_success", "listener_manager.lds.update_success"} {
		if before[name] != 0 {
			t.Errorf("%s = %d before LIVE", name, before[name])
		}
	}
	if used := stats(t, e, "?usedonly&"+strings.TrimPrefix(filter, "?")); len(used) != 0 {
		t.Errorf("usedonly lists stats nothing set yet: %v", used)
	}
	e.SetState(Live)
	after := stats(t, e, filter)
	want := map[string]uint64{"server.state": 0, "listener_manager.workers_started": 1,
		"cluster_manager.cds.update_success": 1, "listener_manager.lds.update_success": 1}
	for name, v := range want {
		if after[name] != v {
			t.Errorf("%s = %d once LIVE, want %d", name, after[name], v)
		}
	}
}

func TestServerStateLagsServerLive(t *testing.T) {
	t.Parallel()
	const flush = 500 * time.Millisecond
	e := startLive(t, Options{StatsFlush: flush})
	if s := stats(t, e, "?filter=^server%5C.(live|state)$"); s["server.live"] != 1 || s["server.state"] != 0 {
		t.Fatalf("at LIVE: %v", s)
	}
	call(t, e, "POST", "/healthcheck/fail")
	failed := time.Now()
	s := stats(t, e, "?filter=^server%5C.(live|state)$")
	if s["server.live"] != 0 {
		t.Errorf("server.live %d right after /healthcheck/fail, want 0 at once", s["server.live"])
	}
	if s["server.state"] != uint64(Live) && time.Since(failed) < flush/2 {
		t.Errorf("server.state %d right after /healthcheck/fail; it should lag until the flush", s["server.state"])
	}
	eventually(t, "server.state DRAINING after a flush", func() bool {
		return stats(t, e, "?filter=^server%5C.state$")["server.state"] == uint64(Draining)
	})
	if took := time.Since(failed); took > 3*flush {
		t.Errorf("server.state took %v to follow", took)
	}
}

// Before Envoy's first stats flush the server.state gauge was never set. The
// flush interval is an hour here, so that no flush can come between the
// start and the reads however slow the machine: with 400 ms, a start under
// -race beside stress-ng flushed before the first read.
func TestServerStateUnsetBeforeFirstFlush(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StayInitializing: true, StatsFlush: time.Hour})
	eventually(t, "admin", func() bool { return !refused(e.AdminAddr()) })
	// Never set, the gauge reads 0, which is LIVE.
	if s := stats(t, e, "?filter=^server%5C.state$"); s["server.state"] != 0 {
		t.Errorf("server.state before the first flush: %v", s)
	}
	if s := stats(t, e, "?usedonly&filter=^server%5C.state$"); len(s) != 0 {
		t.Errorf("usedonly lists server.state before the first flush: %v", s)
	}
}

// The first flush sets server.state, which usedonly then lists.
func TestServerStateSetByFirstFlush(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StayInitializing: true, StatsFlush: 400 * time.Millisecond})
	eventually(t, "first flush", func() bool {
		return !refused(e.AdminAddr()) && stats(t, e, "?usedonly&filter=^server%5C.state$")["server.state"] == uint64(Initializing)
	})
}

func TestIPv6StatNames(t *testing.T) {
	t.Parallel()
	probe, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	probe.Close()
	e := startLive(t, Options{Listeners: []Listener{{Name: "v6", Addr: "[::1]:0"}}})
	addr := e.ListenerAddrs()[0]
	dialHTTP(t, addr.String())
	name := fmt.Sprintf("listener.[__1]_%d.downstream_cx_active", addr.Port())
	eventually(t, name, func() bool { return stats(t, e, "?usedonly")[name] == 1 })
	if a := call(t, e, "GET", "/listeners"); a.body != fmt.Sprintf("v6::[::1]:%d\n", addr.Port()) {
		t.Errorf("/listeners: %q", a.body)
	}
}

func TestIPv6ListenersAreV6Only(t *testing.T) {
	t.Parallel()
	probe, err := net.Listen("tcp6", "[::]:0")
	if err != nil {
		t.Skipf("no IPv6: %v", err)
	}
	probe.Close()
	e := startLive(t, Options{Listeners: []Listener{{Addr: "[::]:0"}}})
	port := e.ListenerAddrs()[0].Port()
	if refused(fmt.Sprintf("[::1]:%d", port)) {
		t.Fatal("IPv6 connect refused")
	}
	if !refused(fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Error("an IPv6 listener took IPv4 connections; Envoy's are v6-only")
	}
}
