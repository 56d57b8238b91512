package fakeenvoy

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// backlog is Envoy's ENVOY_TCP_BACKLOG_SIZE.
const backlog = 128

// socket is a TCP socket that is bound but not listening. That is how Envoy holds a
// listener's port before its workers start: the port is taken and known, yet a connect
// is refused. It also lets a ":0" port be resolved at Start without a window in which
// another process could take it.
type socket struct {
	addr netip.AddrPort
	path string // a unix socket's (Envoy's admin.address.pipe), removed at close

	mu sync.Mutex
	fd int // -1 once listening or closed
}

func reserve(ap netip.AddrPort) (*socket, error) {
	ip := ap.Addr().Unmap()
	family := unix.AF_INET6
	if ip.Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	fail := func(what string, err error) (*socket, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s %s: %w", what, ap, err)
	}
	// Like Envoy, so that a restarted proxy can rebind a port still in TIME_WAIT.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("SO_REUSEADDR", err)
	}
	var sa unix.Sockaddr
	if ip.Is4() {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ip.As4()}
	} else {
		// Envoy's IPv6 listeners are v6-only unless ipv4_compat is set.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail("IPV6_V6ONLY", err)
		}
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	var port int
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		port = b.Port
	case *unix.SockaddrInet6:
		port = b.Port
	}
	return &socket{addr: netip.AddrPortFrom(ip, uint16(port)), fd: fd}, nil
}

// reserveUnix binds a unix socket at path, not listening yet: the path
// exists and a connect is refused, as for a TCP port before Envoy listens.
// A socket left at path by an earlier run is replaced; any other file is not.
func reserveUnix(path string) (*socket, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", path, err)
	}
	return &socket{path: path, fd: fd}, nil
}

// listen turns the reserved socket into a listener; from then on connects succeed.
func (s *socket) listen() (net.Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil, fmt.Errorf("listen %s: socket closed", s)
	}
	if err := unix.Listen(s.fd, backlog); err != nil {
		return nil, fmt.Errorf("listen %s: %w", s, err)
	}
	f := os.NewFile(uintptr(s.fd), "socket:"+s.String())
	s.fd = -1
	defer f.Close() // FileListener holds its own duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", s, err)
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false) // the socket's close removes the path
	}
	return ln, nil
}

func (s *socket) String() string {
	if s.path != "" {
		return s.path
	}
	return s.addr.String()
}

// close releases the port if listen never took the socket over, and
// removes a unix socket's path, as the process's exit would leave it
// refusing.
func (s *socket) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	if s.path != "" {
		os.Remove(s.path)
	}
}
