package portwatch

import "slices"

// istioPorts are the ports Istio reserves for its sidecar: 15000 Envoy's admin,
// 15001 outbound, 15004 debug, 15006 inbound, 15008 HBONE, 15020 the agent's
// status, 15021 the health listener, 15053 DNS and 15090 Prometheus. They are
// the proxy's whether or not anything happens to listen on them yet.
var istioPorts = [...]uint16{15000, 15001, 15004, 15006, 15008, 15020, 15021, 15053, 15090}

// quietIstioPorts are Istio's listeners whose connections say nothing about
// the app's traffic: the kubelet keeps the health listener busy and scrapers
// the Prometheus one (pilot-agent leaves them out of its count too).
var quietIstioPorts = [...]uint16{15021, 15090}

// Owner is the one rule for which ports are the proxy's and which the app's:
// which listening sockets hold a drain (AppSockets) and which of Envoy's
// connections do (QuietPorts).
type Owner struct {
	// AdminPort is Envoy's admin port. It is the proxy's, and the uid of
	// its socket is Envoy's, which tells Envoy's sockets on the ports of
	// /listeners from an app's on the same port (see AppSockets).
	AdminPort uint16
	// HealthPort is the supervisor's own health port, or 0.
	HealthPort uint16
	// ProxyUID marks sockets created by this uid as the proxy's; -1 leaves it unset.
	// The zero value is uid 0, which would count a root app's sockets as the proxy's,
	// so callers without a proxy uid must set -1.
	ProxyUID int
	// AppPorts is an allowlist: when non-empty, only these ports can be the app's, so
	// that another sidecar's listeners do not hold up a drain.
	AppPorts []uint16
}

// QuietPorts are the ports whose connections do not hold a drain: the admin
// and health ports, and Istio's health and Prometheus listeners.
func (o Owner) QuietPorts() []uint16 {
	ports := append([]uint16{}, quietIstioPorts[:]...)
	for _, p := range []uint16{o.AdminPort, o.HealthPort} {
		if p != 0 {
			ports = append(ports, p)
		}
	}
	return ports
}

// fixedPort reports whether a port is the proxy's by its number alone.
func (o Owner) fixedPort(port uint16) bool {
	return slices.Contains(istioPorts[:], port) || port != 0 && (port == o.AdminPort || port == o.HealthPort)
}

// AppSockets returns the sockets that are the app's, given the ports Envoy currently
// reports in /listeners (envoyPorts). Istio's fixed ports always count as the proxy's.
//
// A port in /listeners is not proof: Istio reports an outbound listener such as
// 0.0.0.0_8080 for every mesh service port without binding it, and an app may well
// listen on 8080. So where the admin port's socket shows Envoy's uid and it differs
// from the socket's, the socket is the app's whatever /listeners says.
func (o Owner) AppSockets(socks []Socket, envoyPorts []uint16) []Socket {
	envoyUID, known := o.envoyUID(socks)
	var app []Socket
	for _, s := range socks {
		if o.isProxy(s, envoyPorts, envoyUID, known) {
			continue
		}
		if len(o.AppPorts) > 0 && !slices.Contains(o.AppPorts, s.Addr.Port()) {
			continue
		}
		app = append(app, s)
	}
	return app
}

func (o Owner) envoyUID(socks []Socket) (uint32, bool) {
	if o.AdminPort == 0 {
		return 0, false
	}
	for _, s := range socks {
		if s.Addr.Port() == o.AdminPort {
			return s.UID, true
		}
	}
	return 0, false
}

func (o Owner) isProxy(s Socket, envoyPorts []uint16, envoyUID uint32, known bool) bool {
	if o.ProxyUID >= 0 && int64(s.UID) == int64(o.ProxyUID) {
		return true
	}
	port := s.Addr.Port()
	if o.fixedPort(port) {
		return true
	}
	// A known proxy uid already decided above; /listeners only helps without one.
	return o.ProxyUID < 0 && slices.Contains(envoyPorts, port) && (!known || s.UID == envoyUID)
}
