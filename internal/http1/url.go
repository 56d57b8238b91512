package http1

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// URL is a URL taken apart for a Client: the network and address to dial,
// the Host header, and the request target (path and query); Raw is the URL
// as given, for messages.
type URL struct {
	Network, Addr, Host, Target string
	Raw                         string
}

// Port is the URL's TCP port; 0 for a unix socket.
func (u URL) Port() uint16 {
	if u.Network != "tcp" {
		return 0
	}
	_, port, _ := net.SplitHostPort(u.Addr)
	p, _ := strconv.ParseUint(port, 10, 16)
	return uint16(p)
}

// ErrHTTPS is an https:// URL: the binary carries no TLS, since every
// server it asks is in the pod and none speaks it.
var ErrHTTPS = errors.New("https is not supported")

// ErrScheme is a URL of neither http:// nor unix://.
var ErrScheme = errors.New("want http://HOST:PORT or unix:///PATH")

// ParseURL takes apart an http:// URL, such as Envoy's admin address or a
// readiness URL: http, a host that is an IP address or localhost, a port
// from 1 to 65535 if one is given (80 if not), no credentials, and a path
// and query without spaces, control characters or a fragment, with
// well-formed escapes. Or unix:///PATH, plain HTTP over the unix socket at
// PATH (Envoy's admin.address.pipe), whose requests go to / with Host
// localhost. Other schemes are refused: every server the supervisor asks is
// local and speaks plain HTTP. It is the one check of such a URL, the
// flags' as well as the clients'. It is written out rather than left to
// net/url, whose parser would be in the binary for this alone.
func ParseURL(raw string) (URL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	switch {
	case !ok:
		return URL{}, ErrScheme
	case strings.EqualFold(scheme, "https"):
		return URL{}, ErrHTTPS
	case strings.EqualFold(scheme, "unix"):
		// the path as given: a % in it is refused rather than unescaped
		if !strings.HasPrefix(rest, "/") || !only([]byte(rest), cTarget) || strings.ContainsAny(rest, "?%") {
			return URL{}, errors.New("want unix:///PATH, an absolute path")
		}
		// A path that no socket address holds could never be dialed: the
		// supervisor would wait out its timeout for a proxy it cannot ask.
		if max := len(unix.RawSockaddrUnix{}.Path) - 1; len(rest) > max {
			return URL{}, fmt.Errorf("unix socket path of %d bytes: longer than a unix socket address takes (%d bytes)", len(rest), max)
		}
		return URL{Network: "unix", Addr: rest, Host: "localhost", Target: "/", Raw: raw}, nil
	case !strings.EqualFold(scheme, "http"):
		return URL{}, ErrScheme
	}
	authority := rest
	target := "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, target = rest[:i], rest[i:]
		if target[0] == '?' {
			target = "/" + target
		}
	}
	path, _, _ := strings.Cut(target, "?")
	if !only([]byte(target), cTarget) || !validEscapes([]byte(path)) {
		return URL{}, errors.New("not a URL: a bad path")
	}
	if strings.Contains(authority, "@") {
		return URL{}, errors.New("credentials in the URL are not supported")
	}
	host, port := authority, ""
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && !strings.Contains(authority[i:], "]") {
		host, port = authority[:i], authority[i+1:]
		if _, err := ParsePort(port); err != nil {
			return URL{}, err
		}
	}
	// An IPv6 address, and it alone, is in brackets.
	h, bracketed := strings.CutPrefix(host, "[")
	if bracketed {
		h, bracketed = strings.CutSuffix(h, "]")
	}
	if bracketed != strings.Contains(host, ":") {
		return URL{}, errors.New("not a URL: a bad IPv6 address")
	}
	if bracketed {
		host = h
	}
	// An IPv6 zone is written %25 in a URL (RFC 6874), and a bare % is a
	// bad escape there: neither is of use for a server in the pod, so a %
	// in the host is refused rather than read unlike net/url.
	if strings.Contains(host, "%") {
		return URL{}, errors.New("not a URL: an IPv6 zone (a % in the host) is not supported")
	}
	if err := CheckHost(host); err != nil {
		return URL{}, err
	}
	if port == "" {
		port = "80"
	}
	return URL{Network: "tcp", Addr: net.JoinHostPort(host, port), Host: authority, Target: target, Raw: raw}, nil
}

// ParsePort reads a decimal port from 1 to 65535. Service names (":http")
// are refused: the port is also the proxy's, for telling sockets apart.
func ParsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// Dial dials the URL's address, each dial bounded by timeout as well as by
// its context. An address that ParseURL would not give fails every dial.
func (u URL) Dial(timeout time.Duration) func(context.Context) (net.Conn, error) {
	if u.Network == "unix" {
		d := &net.Dialer{Timeout: timeout}
		addr := &net.UnixAddr{Name: u.Addr, Net: "unix"}
		return func(ctx context.Context) (net.Conn, error) {
			c, err := d.DialUnix(ctx, "unix", nil, addr)
			if err != nil {
				return nil, err // not a nil *UnixConn in a non-nil Conn
			}
			return c, nil
		}
	}
	addrs, err := TCPAddrs(u.Addr)
	if err != nil {
		err = fmt.Errorf("dial %s: %w", u.Addr, err)
		return func(context.Context) (net.Conn, error) { return nil, err }
	}
	return func(ctx context.Context) (net.Conn, error) { return DialTCP(ctx, timeout, addrs) }
}
