package portwatch

import (
	"net/netip"
	"slices"
	"sort"
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
	// sort.Slice, not slices.Sort: a generic sort is compiled anew for
	// each element type, 4 KB of the binary for uint16 alone.
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	return slices.Compact(ports)
}
