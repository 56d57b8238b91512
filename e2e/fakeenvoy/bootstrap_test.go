package fakeenvoy

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseYAML(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		src  string
		want any
	}{
		{"a: 1\nb: x # comment\n", map[string]any{"a": 1.0, "b": "x"}},
		{"a:\n- x\n- {k: v, n: [1, '2', \"3\"]}\n", map[string]any{"a": []any{"x", map[string]any{"k": "v", "n": []any{1.0, "2", "3"}}}}},
		{"a:\n  - k: 1\n    j: 2\n  -\n    - z\n", map[string]any{"a": []any{map[string]any{"k": 1.0, "j": 2.0}, []any{"z"}}}},
		{"\"@type\": t\nx: |\n  line1\n  line2\ny: true\nz: ~\n", map[string]any{"@type": "t", "x": "line1\nline2\n", "y": true, "z": nil}},
		{"a: {b: {c: d},\n  e: f}\n", map[string]any{"a": map[string]any{"b": map[string]any{"c": "d"}, "e": "f"}}},
		{`{"json": [1, {"x": "y"}]}`, map[string]any{"json": []any{1.0, map[string]any{"x": "y"}}}},
		{"url: http://h:1/p#frag\n", map[string]any{"url": "http://h:1/p#frag"}},
	} {
		got, err := parseYAML(tt.src)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseYAML(%q) = %#v, %v; want %#v", tt.src, got, err, tt.want)
		}
	}
	for _, bad := range []string{"a: 1\na: 2\n", "a: &x 1\n", "a:\n  b: 1\n c: 2\n", "a: {b: c\n"} {
		if v, err := parseYAML(bad); err == nil {
			t.Errorf("parseYAML(%q) = %#v, want an error", bad, v)
		}
	}
}

// The config the plain-Envoy manifests ship parses, its ConfigMap's block
// scalar included.
func TestParseDeployBootstrap(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/envoy-sidecar/envoy-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cm, err := parseYAML(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := cm.(map[string]any)["data"].(map[string]any)["envoy.yaml"].(string)
	b, err := ParseBootstrap([]byte(body), false, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.AdminAddr == "" && b.AdminPipe == "" {
		t.Error("no admin address")
	}
	if len(b.Listeners) != 1 {
		t.Fatalf("listeners %+v", b.Listeners)
	}
	l := b.Listeners[0]
	if l.Addr != "0.0.0.0:8000" || len(l.Routes) != 2 || l.Routes[0].Path != "/hello" || l.Routes[0].Status != 200 ||
		l.Routes[1].Prefix != "/" || l.Routes[1].Upstream != "127.0.0.1:8080" {
		t.Errorf("listener %+v", l)
	}
}

func TestParseBootstrap(t *testing.T) {
	t.Parallel()
	b, err := ParseBootstrap(nil, false, sidecarYAML("127.0.0.1:8080", "10.0.0.1:80", true))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Listeners) != 3 {
		t.Fatalf("%d listeners", len(b.Listeners))
	}
	in, out, tcp := b.Listeners[0], b.Listeners[1], b.Listeners[2]
	if !in.Inbound || out.Inbound || !tcp.Inbound || !tcp.TCP || tcp.Upstream != "127.0.0.1:8080" {
		t.Errorf("directions or tcp: %+v %+v %+v", in, out, tcp)
	}
	if in.StatPrefix != "inbound" || in.Routes[2].Upstream != "127.0.0.1:8080" || in.Routes[2].H2 {
		t.Errorf("inbound %+v", in)
	}
	if r := out.Routes[2]; r.Upstream != "10.0.0.1:80" || !r.H2 {
		t.Errorf("outbound route %+v: want the h2 cluster's endpoint", r)
	}
	if r := out.Routes[1]; r.Cluster != "missing" || r.Upstream != "" {
		t.Errorf("route to a missing cluster %+v", r)
	}
	// -c's file and --config-yaml merge: the admin from one, listeners from both.
	b, err = ParseBootstrap([]byte(`{"admin": {"address": {"pipe": {"path": "/run/admin.sock"}}}}`), true, sidecarYAML("127.0.0.1:1", "127.0.0.1:2", false))
	if err != nil || b.AdminPipe != "/run/admin.sock" || len(b.Listeners) != 3 {
		t.Errorf("merged: %+v, %v", b, err)
	}
	// tcp_proxy's check_drain_close and the connection manager's drain_timeout.
	b, err = ParseBootstrap(nil, false, `static_resources: {listeners: [
  {name: t, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, filter_chains: [{filters: [{name: envoy.filters.network.tcp_proxy, typed_config: {stat_prefix: t, check_drain_close: true}}]}]},
  {name: h, address: {socket_address: {address: 127.0.0.1, port_value: 2}}, filter_chains: [{filters: [{name: envoy.filters.network.http_connection_manager, typed_config: {stat_prefix: h, drain_timeout: 0.25s}}]}]}]}`)
	if err != nil || !b.Listeners[0].CheckDrainClose || b.Listeners[1].DrainTimeout != 250*time.Millisecond {
		t.Errorf("drain settings: %+v, %v", b, err)
	}
	for _, bad := range []string{
		"static_resources: {listeners: [{name: x, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, filter_chains: [{filters: [{name: envoy.filters.network.http_connection_manager, typed_config: {drain_timeout: soon}}]}]}]}",
		"static_resources: {listeners: [{name: x, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, traffic_direction: SIDEWAYS, filter_chains: [{filters: [{name: envoy.filters.network.tcp_proxy}]}]}]}",
		"static_resources: {listeners: [{name: x, address: {socket_address: {address: localhost, port_value: 1}}, filter_chains: [{filters: [{name: envoy.filters.network.tcp_proxy}]}]}]}",
		"static_resources: {listeners: [{name: x, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, filter_chains: [{filters: [{name: envoy.filters.network.redis_proxy}]}]}]}",
	} {
		if _, err := ParseBootstrap(nil, false, bad); err == nil || !strings.Contains(err.Error(), "listener x") {
			t.Errorf("%s: %v, want an error naming the listener", bad, err)
		}
	}
}
