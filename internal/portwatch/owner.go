package portwatch

import "slices"

// IstioPorts are the ports Istio reserves for its sidecar (REFERENCE.md). They are the
// proxy's whether or not Envoy or pilot-agent happens to be listening on them yet.
var IstioPorts = []uint16{15000, 15001, 15004, 15006, 15008, 15020, 15021, 15053, 15090}

// Owner tells the app's listening sockets from the proxy's (DESIGN.md's rule).
type Owner struct {
	// ProxyPorts are the proxy's fixed ports: the health port, the admin port, and
	// anything else the supervisor knows to be the proxy's.
	ProxyPorts []uint16
	// ProxyUID marks sockets created by this uid as the proxy's; -1 leaves it unset.
	// The zero value is uid 0, which would count a root app's sockets as the proxy's,
	// so callers without a proxy uid must set -1.
	ProxyUID int
	// AppPorts is an allowlist: when non-empty, only these ports can be the app's, so
	// that another sidecar's listeners do not hold up a drain.
	AppPorts []uint16
}

// AppSockets returns the sockets that are the app's, given the ports Envoy currently
// reports in /listeners (envoyPorts). Istio's fixed ports always count as the proxy's.
func (o Owner) AppSockets(socks []Socket, envoyPorts []uint16) []Socket {
	var app []Socket
	for _, s := range socks {
		if o.isProxy(s, envoyPorts) {
			continue
		}
		if len(o.AppPorts) > 0 && !slices.Contains(o.AppPorts, s.Addr.Port()) {
			continue
		}
		app = append(app, s)
	}
	return app
}

func (o Owner) isProxy(s Socket, envoyPorts []uint16) bool {
	if o.ProxyUID >= 0 && int64(s.UID) == int64(o.ProxyUID) {
		return true
	}
	port := s.Addr.Port()
	return slices.Contains(envoyPorts, port) ||
		slices.Contains(IstioPorts, port) ||
		slices.Contains(o.ProxyPorts, port)
}
