package fakeenvoy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

type kind uint8

const (
	counterKind kind = iota
	gaugeKind
)

// metric is one Envoy stat. Envoy's usedonly looks at a flag, not at the value: a gauge
// that went up and back to 0 is still listed, one never touched is not.
type metric struct {
	kind  kind
	value atomic.Uint64
	used  atomic.Bool
}

func (m *metric) add(d int64) {
	m.value.Add(uint64(d)) // two's complement makes a negative d a subtraction
	m.used.Store(true)
}

func (m *metric) set(v uint64) {
	m.value.Store(v)
	m.used.Store(true)
}

type store struct {
	mu sync.Mutex
	m  map[string]*metric
}

func newStore() *store { return &store{m: make(map[string]*metric)} }

func (s *store) get(name string, k kind) *metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.m[name]
	if !ok {
		m = &metric{kind: k}
		s.m[name] = m
	}
	return m
}

func (s *store) counter(name string) *metric { return s.get(name, counterKind) }
func (s *store) gauge(name string) *metric   { return s.get(name, gaugeKind) }

// value reads a stat by name; it reports false for a stat that does not exist.
func (s *store) value(name string) (uint64, bool) {
	s.mu.Lock()
	m, ok := s.m[name]
	s.mu.Unlock()
	if !ok {
		return 0, false
	}
	return m.value.Load(), true
}

type stat struct {
	name  string
	value uint64
}

func (s *store) snapshot(keep func(name string, m *metric) bool) []stat {
	s.mu.Lock()
	out := make([]stat, 0, len(s.m))
	for name, m := range s.m {
		if keep(name, m) {
			out = append(out, stat{name, m.value.Load()})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b stat) int { return strings.Compare(a.name, b.name) })
	return out
}

func (s *store) resetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.m {
		if m.kind == counterKind {
			m.value.Store(0)
		}
	}
}

// cxStats are the stats one connection moves. Envoy counts each connection in the
// listener's stat, in its worker's copy and, for HTTP, in the connection manager's copy
// too, so a client that added them all up would count each connection two or three
// times; only the per-listener totals are a connection count.
type cxStats struct {
	active []*metric
	total  []*metric
}

func (c cxStats) opened() {
	for _, m := range c.active {
		m.add(1)
	}
	for _, m := range c.total {
		m.add(1)
	}
}

func (c cxStats) closed() {
	for _, m := range c.active {
		m.add(-1)
	}
}

func (s *store) cx(scopes ...string) cxStats {
	var c cxStats
	for _, scope := range scopes {
		c.active = append(c.active, s.gauge(scope+".downstream_cx_active"))
		c.total = append(c.total, s.counter(scope+".downstream_cx_total"))
	}
	return c
}

// listenerStatScope is "listener.<address>" the way Envoy names it: the address as
// Envoy prints it ("127.0.0.1:15001", "[::1]:15001") with ':' made '_', so IPv6 gives
// "listener.[__1]_15001".
func listenerStatScope(ap netip.AddrPort) string {
	return "listener." + sanitizeStatName(ap.String())
}

// registerStats creates the stats a freshly loaded Envoy has. Gauges that Envoy sets at
// load time are set (so usedonly lists them); the rest stay unused until something
// happens.
func (e *Envoy) registerStats() {
	s := e.stats
	for _, name := range []string{
		"cluster_manager.cds.update_attempt", "cluster_manager.cds.update_success",
		"cluster_manager.cds.update_rejected",
		"listener_manager.lds.update_attempt", "listener_manager.lds.update_success",
		"listener_manager.lds.update_rejected",
		"listener_manager.listener_stopped", "listener_manager.listener_create_success",
		"http.admin.downstream_rq_total",
	} {
		s.counter(name)
	}
	for _, name := range []string{
		"server.state", "server.concurrency", "server.uptime", "server.total_connections",
		"server.parent_connections", "server.hot_restart_epoch",
		"listener_manager.workers_started",
	} {
		s.gauge(name)
	}
	s.gauge("server.live").set(0)
	s.counter("listener_manager.listener_added").add(int64(len(e.listeners)))
	s.gauge("listener_manager.total_listeners_active").set(uint64(len(e.listeners)))
	s.gauge("listener_manager.total_listeners_warming").set(0)
	s.gauge("listener_manager.total_listeners_draining").set(0)
	e.adminCx = s.cx("listener.admin", "listener.admin.main_thread", "http.admin")
	for _, l := range e.listeners {
		s.cx(l.statScope)
		if !l.cfg.TCP {
			s.cx("http." + l.cfg.StatPrefix)
			s.gauge("http." + l.cfg.StatPrefix + ".downstream_rq_active")
			s.counter("http." + l.cfg.StatPrefix + ".downstream_rq_total")
			s.counter("http." + l.cfg.StatPrefix + ".downstream_cx_drain_close")
		}
	}
}

// updateServerStats is Envoy's stats flush for the server.* gauges. server.state is set
// only here, which is why it lags.
func (e *Envoy) updateServerStats() {
	s := e.stats
	st := e.State()
	s.gauge("server.state").set(uint64(st))
	e.updateLive(st)
	s.gauge("server.concurrency").set(uint64(e.opts.Concurrency))
	s.gauge("server.uptime").set(uint64(e.uptime().Seconds()))
	s.gauge("server.total_connections").set(uint64(e.ActiveConnections()))
	s.gauge("server.parent_connections").set(0)
	s.gauge("server.hot_restart_epoch").set(0)
}

// change applies f under the lock and, when it changed something, puts the
// state it leaves in server.live.
func (e *Envoy) change(f func() bool) {
	e.mu.Lock()
	changed := f()
	st := e.stateLocked()
	e.mu.Unlock()
	if changed {
		e.updateLive(st)
	}
}

// updateLive keeps server.live current at once, unlike server.state.
func (e *Envoy) updateLive(st State) {
	live := uint64(0)
	if st == Live {
		live = 1
	}
	e.stats.gauge("server.live").set(live)
}

// statTypes are the values /stats takes for type=.
var statTypes = []string{"All", "Counters", "Gauges", "Histograms", "TextReadouts"}

func (e *Envoy) handleStats(w http.ResponseWriter, r *http.Request) {
	q := query(r)
	var filter *regexp.Regexp
	if f, ok := q["filter"]; ok {
		// Go's regexp is RE2, the syntax Envoy's filter takes.
		re, err := regexp.Compile(f[0])
		if err != nil {
			reply(w, http.StatusBadRequest, "", "Invalid re2 regex")
			return
		}
		filter = re
	}
	if b := firstNonEmpty(q, "histogram_buckets"); b != "" &&
		!slices.Contains([]string{"cumulative", "disjoint", "detailed", "none"}, b) {
		reply(w, http.StatusBadRequest, "", "usage: /stats?histogram_buckets=(cumulative|disjoint|none)\n")
		return
	}
	typ := "All"
	if t, ok := q["type"]; ok {
		if !slices.Contains(statTypes, t[0]) {
			reply(w, http.StatusBadRequest, "", "invalid &type= param")
			return
		}
		typ = t[0]
	}
	format := firstNonEmpty(q, "format")
	switch format {
	case "", "text", "json":
	case "html":
		reply(w, http.StatusBadRequest, "", "HTML output was disabled by building with --define=admin_html=disabled")
		return
	case "active-html":
		reply(w, http.StatusBadRequest, "", "Active HTML output was disabled by building with --define=admin_html=disabled")
		return
	case "prometheus":
		// Envoy renders Prometheus with tag extraction; the fake does not reproduce it.
		reply(w, http.StatusBadRequest, "", "prometheus format is not reproduced by fake-envoy\n")
		return
	default:
		reply(w, http.StatusBadRequest, "", "usage: /stats?format=(html|active-html|json|prometheus|text)\n\n")
		return
	}
	_, usedOnly := q["usedonly"]
	stats := e.stats.snapshot(func(name string, m *metric) bool {
		switch {
		case typ == "Counters" && m.kind != counterKind,
			typ == "Gauges" && m.kind != gaugeKind,
			typ == "Histograms", typ == "TextReadouts":
			return false
		case usedOnly && !m.used.Load():
			return false
		}
		return filter == nil || filter.MatchString(name)
	})
	if format == "json" {
		reply(w, http.StatusOK, contentTypeJSON, statsJSON(stats))
		return
	}
	var b strings.Builder
	for _, s := range stats {
		fmt.Fprintf(&b, "%s: %d\n", s.name, s.value)
	}
	reply(w, http.StatusOK, "", b.String())
}

// statsJSON renders Envoy's streamed, compact form: {"stats":[{"name":…,"value":…},…]}.
func statsJSON(stats []stat) string {
	var b strings.Builder
	b.WriteString(`{"stats":[`)
	for i, s := range stats {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(s.name)
		b.WriteString(`{"name":`)
		b.Write(name)
		b.WriteString(`,"value":`)
		b.WriteString(strconv.FormatUint(s.value, 10))
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.String()
}

func (e *Envoy) handleResetCounters(w http.ResponseWriter, _ *http.Request) {
	e.stats.resetCounters()
	reply(w, http.StatusOK, "", "OK\n")
}
