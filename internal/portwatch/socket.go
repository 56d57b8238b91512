package portwatch

import (
	"net/netip"
	"slices"
)

// Socket is one TCP listening socket in the current network namespace.
type Socket struct {
	Addr  netip.AddrPort
	UID   uint32
	Inode uint64
}

// Ports returns the distinct sorted ports of socks (for log lines like
// "app ports still open: 8080,9090").
func Ports(socks []Socket) []uint16 {
	ports := make([]uint16, 0, len(socks))
	for _, s := range socks {
		ports = append(ports, s.Addr.Port())
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}
