package portwatch

import (
	"net/netip"
	"slices"
	"testing"
)

func sock(addr string, uid uint32) Socket {
	return Socket{Addr: netip.MustParseAddrPort(addr), UID: uid, Inode: 1}
}

func TestAppSockets(t *testing.T) {
	const appUID, proxyUID = 1000, 1337
	var (
		app8080   = sock("0.0.0.0:8080", appUID)
		app9090v6 = sock("[::]:9090", appUID)
		rootApp   = sock("127.0.0.1:7070", 0)
		envoy     = sock("0.0.0.0:10000", proxyUID)
		envoyRoot = sock("0.0.0.0:10000", 0)
		admin     = sock("127.0.0.1:15000", proxyUID)
		health    = sock("[::]:15022", 0)
		inbound   = sock("0.0.0.0:15006", 0)
		agent     = sock("[::]:15020", appUID)
		sidecar   = sock("127.0.0.1:4191", 2102) // another sidecar's admin
	)
	all := []Socket{app8080, app9090v6, rootApp, envoy, admin, health, inbound, agent, sidecar}
	standalone := Owner{AdminPort: 15000, HealthPort: 15022, ProxyUID: -1}

	tests := []struct {
		name       string
		owner      Owner
		socks      []Socket
		envoyPorts []uint16
		want       []Socket
	}{
		{name: "nothing listening", owner: standalone},
		{name: "envoy's listener ports are the proxy's", owner: standalone,
			socks: []Socket{app8080, envoyRoot}, envoyPorts: []uint16{10000},
			want: []Socket{app8080}},
		{name: "a port envoy no longer reports is the app's", owner: standalone,
			socks: []Socket{app8080, envoyRoot}, envoyPorts: nil,
			want: []Socket{app8080, envoyRoot}},
		{name: "istio's fixed ports are the proxy's even without envoy", owner: standalone,
			socks: []Socket{inbound, agent, app8080},
			want:  []Socket{app8080}},
		{name: "health and admin ports are the proxy's", owner: standalone,
			socks: []Socket{admin, health, rootApp},
			want:  []Socket{rootApp}},
		{name: "proxy uid", owner: Owner{ProxyUID: proxyUID},
			socks: []Socket{envoy, app8080, rootApp},
			want:  []Socket{app8080, rootApp}},
		{name: "unset proxy uid leaves root sockets to the app", owner: Owner{ProxyUID: -1},
			socks: []Socket{rootApp},
			want:  []Socket{rootApp}},
		{name: "proxy uid 0 claims root sockets", owner: Owner{ProxyUID: 0},
			socks: []Socket{rootApp, app8080},
			want:  []Socket{app8080}},
		{name: "ipv6-only app listener counts", owner: standalone,
			socks: []Socket{app9090v6, health},
			want:  []Socket{app9090v6}},
		{name: "without allowlist another sidecar counts as the app", owner: standalone,
			socks: []Socket{sidecar, app8080},
			want:  []Socket{sidecar, app8080}},
		{name: "allowlist drops another sidecar", owner: Owner{ProxyUID: -1, AppPorts: []uint16{8080, 9090}},
			socks: all, envoyPorts: []uint16{10000},
			want: []Socket{app8080, app9090v6}},
		{name: "allowlist cannot claim a proxy port", owner: Owner{ProxyUID: proxyUID, AppPorts: []uint16{8080, 15006, 10000}},
			socks: all, envoyPorts: []uint16{10000},
			want: []Socket{app8080}},
		{name: "an unbound outbound listener on the app's port does not hide the app",
			owner: Owner{AdminPort: 15000, ProxyUID: -1},
			socks: []Socket{admin, envoy, app8080}, envoyPorts: []uint16{8080, 10000},
			want: []Socket{app8080}},
		{name: "with a proxy uid, /listeners is not consulted", owner: Owner{ProxyUID: proxyUID},
			socks: []Socket{app8080, envoy}, envoyPorts: []uint16{8080, 10000},
			want: []Socket{app8080}},
		{name: "istio pod", owner: Owner{AdminPort: 15000, HealthPort: 15022, ProxyUID: proxyUID},
			socks: all, envoyPorts: []uint16{15001, 15006, 15021, 15090, 10000},
			want: []Socket{app8080, app9090v6, rootApp, sidecar}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.owner.AppSockets(tt.socks, tt.envoyPorts)
			if !slices.Equal(got, tt.want) {
				t.Errorf("AppSockets:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestPorts(t *testing.T) {
	tests := []struct {
		name  string
		socks []Socket
		want  []uint16
	}{
		{name: "none", want: []uint16{}},
		{name: "sorted and distinct across families",
			socks: []Socket{sock("[::]:9090", 0), sock("0.0.0.0:8080", 0), sock("127.0.0.1:9090", 0), sock("[::1]:8080", 0)},
			want:  []uint16{8080, 9090}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Ports(tt.socks); !slices.Equal(got, tt.want) {
				t.Errorf("Ports = %v, want %v", got, tt.want)
			}
		})
	}
}
