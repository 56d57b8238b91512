package portwatch

import "slices"

// istioPorts are the ports Istio reserves for its sidecar (REFERENCE.md). They are the
// proxy's whether or not Envoy or pilot-agent happens to be listening on them yet.
var istioPorts = [...]uint16{15000, 15001, 15004, 15006, 15008, 15020, 15021, 15053, 15090}

// IstioPorts returns Istio's reserved sidecar ports.
func IstioPorts() []uint16 { return slices.Clone(istioPorts[:]) }

// Owner tells the app's listening sockets from the proxy's (DESIGN.md's rule).
type Owner struct {
	// ProxyPorts are the proxy's fixed ports: the health port, the admin port, and
	// anything else the supervisor knows to be the proxy's.
	ProxyPorts []uint16
	// AdminPort is Envoy's admin port. The uid of its socket is Envoy's, which
	// tells Envoy's sockets on the ports of /listeners from an app's on the same
	// port (see AppSockets).
	AdminPort uint16
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
	if slices.Contains(istioPorts[:], port) || slices.Contains(o.ProxyPorts, port) {
		return true
	}
	// A known proxy uid already decided above; /listeners only helps without one.
	return o.ProxyUID < 0 && slices.Contains(envoyPorts, port) && (!known || s.UID == envoyUID)
}
