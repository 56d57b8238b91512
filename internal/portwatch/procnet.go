package portwatch

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
)

// ScanProc lists listening TCP sockets from /proc/net/tcp and /proc/net/tcp6. Reading
// those files makes the kernel format every socket, established ones included, so it
// is the fallback for where netlink is refused; Scanner uses it then.
func ScanProc() ([]Socket, error) {
	var socks []Socket
	for _, path := range [...]string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) && path == "/proc/net/tcp6" {
			continue // a kernel without IPv6 has no IPv6 listeners
		}
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		socks, err = readProcNet(f, socks)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	return socks, nil
}

// readProcNet appends the listeners in a /proc/net/tcp or tcp6 table to dst.
func readProcNet(r io.Reader, dst []Socket) ([]Socket, error) {
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		s, ok, err := parseProcLine(sc.Bytes())
		if err != nil {
			return dst, fmt.Errorf("line %d: %w", line, err)
		}
		if ok {
			dst = append(dst, s)
		}
	}
	return dst, sc.Err()
}

// Columns of a /proc/net/tcp line, counted from 0 ("sl").
const (
	procLocal = 1
	procState = 3
	procUID   = 7
	procInode = 9
)

// parseProcLine parses one line of /proc/net/tcp{,6}; ok is false for the header,
// blank lines and sockets that are not listening.
func parseProcLine(line []byte) (s Socket, ok bool, err error) {
	var cols [procInode + 1][]byte
	rest := line
	for i := range cols {
		cols[i], rest = nextField(rest)
	}
	if len(cols[0]) == 0 || string(cols[0]) == "sl" {
		return Socket{}, false, nil
	}
	if string(cols[procState]) != "0A" { // TCP_LISTEN
		return Socket{}, false, nil
	}
	if len(cols[procInode]) == 0 {
		return Socket{}, false, fmt.Errorf("listening socket line has %d columns, want at least %d", countFields(line), procInode+1)
	}
	addr, err := parseProcAddr(cols[procLocal])
	if err != nil {
		return Socket{}, false, err
	}
	uid, err := parseUint(cols[procUID], 10, 32)
	if err != nil {
		return Socket{}, false, fmt.Errorf("uid: %w", err)
	}
	inode, err := parseUint(cols[procInode], 10, 64)
	if err != nil {
		return Socket{}, false, fmt.Errorf("inode: %w", err)
	}
	return Socket{Addr: addr, UID: uint32(uid), Inode: inode}, true, nil
}

// parseProcAddr parses "0100007F:1F90". The kernel prints the address as 32-bit words
// in host byte order, each as %08X, and the port as a plain number.
func parseProcAddr(b []byte) (netip.AddrPort, error) {
	hexAddr, hexPort, found := bytes.Cut(b, []byte{':'})
	if !found {
		return netip.AddrPort{}, fmt.Errorf("address %q has no port", b)
	}
	port, err := parseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port in %q: %w", b, err)
	}
	var raw [16]byte
	n := len(hexAddr) / 2
	if len(hexAddr) != 8 && len(hexAddr) != 32 {
		return netip.AddrPort{}, fmt.Errorf("address %q is neither IPv4 nor IPv6", b)
	}
	for i := 0; i < n; i += 4 {
		w, err := parseUint(hexAddr[2*i:2*i+8], 16, 32)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("address %q: %w", b, err)
		}
		binary.NativeEndian.PutUint32(raw[i:], uint32(w))
	}
	addr := netip.AddrFrom16(raw)
	if n == 4 {
		addr = netip.AddrFrom4([4]byte(raw[:4]))
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// parseUint is strconv.ParseUint for a byte slice, without the allocation of
// converting every field of every line to a string.
func parseUint(b []byte, base, bits int) (uint64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty number")
	}
	limit := uint64(1)<<bits - 1
	if bits == 64 {
		limit = ^uint64(0)
	}
	var n uint64
	for _, c := range b {
		var d uint64
		switch {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case base == 16 && 'a' <= c && c <= 'f':
			d = uint64(c - 'a' + 10)
		case base == 16 && 'A' <= c && c <= 'F':
			d = uint64(c - 'A' + 10)
		default:
			return 0, fmt.Errorf("bad digit %q in %q", c, b)
		}
		if d >= uint64(base) || n > (limit-d)/uint64(base) {
			return 0, fmt.Errorf("%q out of range", b)
		}
		n = n*uint64(base) + d
	}
	return n, nil
}

func nextField(b []byte) (field, rest []byte) {
	b = bytes.TrimLeft(b, " \t")
	i := bytes.IndexAny(b, " \t")
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i:]
}

func countFields(b []byte) int {
	n := 0
	for f, rest := nextField(b); len(f) > 0; f, rest = nextField(rest) {
		n++
	}
	return n
}
