package envoy

import "testing"

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
