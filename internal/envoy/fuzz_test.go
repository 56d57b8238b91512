package envoy

import (
	"strings"
	"testing"
)

// Admin answers are input from another process; parsing them must never
// panic, and a sum must never count what it was told to leave out.
func FuzzParseStats(f *testing.F) {
	f.Add("listener.0.0.0.0_15006.downstream_cx_active: 3\nlistener.admin.downstream_cx_active: 1\n")
	f.Add("cluster_manager.cds.update_success: 1\nP0(nan,0) P25(nan,0)\n")
	f.Add("listener.[__]_8080.worker_0.downstream_cx_active: 18446744073709551615\n")
	f.Add("listener.x_1.downstream_cx_active: 18446744073709551615\nlistener.y_2.downstream_cx_active: 5\nhttp.p.downstream_rq_active: 18446744073709551615\n")
	f.Fuzz(func(t *testing.T, body string) {
		stats := parseStats([]byte(body))
		for name := range stats {
			if strings.Contains(name, "\n") {
				t.Fatalf("name %q spans lines", name)
			}
		}
		if c := countConnections(stats, []uint16{15090}); c.Active < 0 || c.Busy < 0 || c.Busy > c.Active {
			t.Fatalf("counted %+v", c)
		}
	})
}

func FuzzParseListeners(f *testing.F) {
	f.Add(`{"listener_statuses":[{"name":"x","local_address":{"socket_address":{"address":"0.0.0.0","port_value":15006}}}]}`)
	f.Add(`{"listener_statuses":[{"additional_local_addresses":[{"address":{"socket_address":{"port_value":1}}}]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		ports, err := parseListeners([]byte(body))
		if err != nil {
			return
		}
		seen := map[uint16]bool{}
		for _, p := range ports {
			if p == 0 || seen[p] {
				t.Fatalf("port list %v has a zero or a repeat", ports)
			}
			seen[p] = true
		}
	})
}
