package fakeenvoy

import (
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The config the plain-Envoy manifests ship parses, its ConfigMap's block
// scalar included.
func TestParseDeployBootstrap(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/envoy-sidecar/envoy-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct{ Data map[string]string }
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	b, err := ParseBootstrap([]byte(cm.Data["envoy.yaml"]), false, "")
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
  {name: t, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, filter_chains: [{filters: [{name: tcp, typed_config: {"@type": `+tcpProxyType+`, stat_prefix: t, cluster: c, check_drain_close: true}}]}]},
  {name: h, address: {socket_address: {address: 127.0.0.1, port_value: 2}}, filter_chains: [{filters: [{name: hcm, typed_config: {"@type": `+hcmType+`, stat_prefix: h, route_config: {}, drain_timeout: 0.25s}}]}]}]}`)
	if err != nil || !b.Listeners[0].CheckDrainClose || b.Listeners[1].DrainTimeout != 250*time.Millisecond {
		t.Errorf("drain settings: %+v, %v", b, err)
	}
}

const (
	hcmType      = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	tcpProxyType = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
)

// A bootstrap Envoy would refuse to start with is an error that says why:
// the fake reads it into Envoy's own types and checks their rules. Each of
// these was read before, into the fields the fake uses, the rest ignored.
func TestParseBootstrapRejectsWhatEnvoyRejects(t *testing.T) {
	t.Parallel()
	listener := func(name, filter string) string {
		return `static_resources: {listeners: [{name: ` + name + `, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, filter_chains: [{filters: [` + filter + `]}]}]}`
	}
	hcm := func(fields string) string {
		return listener("x", `{name: hcm, typed_config: {"@type": `+hcmType+`, `+fields+`}}`)
	}
	for _, tt := range []struct{ name, yaml, want string }{
		{"a misspelt field", "admin: {adress: {pipe: {path: /a.sock}}}", `unknown field "adress"`},
		{"a typed_config without its type", listener("x", `{name: envoy.filters.network.tcp_proxy, typed_config: {stat_prefix: t, cluster: c}}`), "@type"},
		{"a filter without a typed_config", listener("x", `{name: envoy.filters.network.tcp_proxy}`), "listener x: filter envoy.filters.network.tcp_proxy: no typed_config"},
		{"an HTTP filter without a typed_config", hcm(`stat_prefix: h, route_config: {}, http_filters: [{name: envoy.filters.http.router}]`), "listener x: filter hcm: http filter envoy.filters.http.router: no typed_config"},
		{"an extension Envoy was built without", listener("x", `{name: r, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy}}`), "redis_proxy"},
		{"a filter the fake does not run", listener("x", `{name: tls, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector}}`), "listener x: filter tls (type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector): the fake runs only"},
		{"an unknown traffic direction", `static_resources: {listeners: [{name: x, traffic_direction: SIDEWAYS}]}`, "SIDEWAYS"},
		{"a duration that is not one", hcm(`stat_prefix: h, route_config: {}, drain_timeout: soon`), "soon"},
		{"a connection manager without its stat_prefix", hcm(`route_config: {}`), "StatPrefix"},
		{"a connection manager without routes", hcm(`stat_prefix: h`), "RouteSpecifier"},
		{"a port out of range", `admin: {address: {socket_address: {address: 127.0.0.1, port_value: 70000}}}`, "PortValue"},
		{"a listener on a host name", `static_resources: {listeners: [{name: x, address: {socket_address: {address: localhost, port_value: 1}}, filter_chains: [{filters: [{name: t, typed_config: {"@type": ` + tcpProxyType + `, stat_prefix: t, cluster: c}}]}]}]}`, `listener x: address: address "localhost": want an IP`},
		{"a route to a cluster that does not exist", hcm(`stat_prefix: h, route_config: {virtual_hosts: [{name: v, domains: ["*"], routes: [{match: {prefix: /}, route: {cluster: missing}}]}]}`), "listener x: filter hcm: route_config: unknown cluster 'missing'"},
		{"two listeners of one name", `static_resources: {listeners: [{name: x}, {name: x}]}`, "listener x: a listener of that name already exists"},
		{"two clusters of one name", `static_resources: {clusters: [{name: c}, {name: c}]}`, "duplicate cluster 'c'"},
		{"YAML that is not", "admin: {address: [", "YAML"},
	} {
		_, err := ParseBootstrap(nil, false, tt.yaml)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error with %q", tt.name, err, tt.want)
		}
	}
	// -c's file, as JSON, names where it is wrong too.
	if _, err := ParseBootstrap([]byte(`{"admin": {"address": {"pipe": {"path": "/a.sock"}}}, "statc_resources": {}}`), true, ""); err == nil || !strings.Contains(err.Error(), `unknown field "statc_resources"`) {
		t.Errorf("a misspelt field in -c's JSON: %v", err)
	}
}
