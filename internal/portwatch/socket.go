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
	// An insertion sort: a socket list is a few ports, and neither a
	// generic sort (compiled anew for each element type, 4 KB of the
	// binary for uint16 alone) nor package sort is worth linking for it.
	for i := 1; i < len(ports); i++ {
		for j := i; j > 0 && ports[j] < ports[j-1]; j-- {
			ports[j], ports[j-1] = ports[j-1], ports[j]
		}
	}
	return slices.Compact(ports)
}
