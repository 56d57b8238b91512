package http1

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// URL is an http:// URL taken apart for a Client: the address to dial, the
// Host header, and the request target (path and query).
type URL struct {
	Addr, Host, Target string
}

// ErrHTTPS is an https:// URL: the binary carries no TLS, since every
// server it asks is in the pod and none speaks it.
var ErrHTTPS = errors.New("https is not supported")

// ParseURL takes apart an http:// URL, such as Envoy's admin address or a
// readiness URL: http, a host that is an IP address or a DNS name, a port
// from 1 to 65535 if one is given (80 if not), no credentials. It is the one
// check of such a URL, the flags' as well as the clients'.
func ParseURL(raw string) (URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return URL{}, errors.New("not a URL")
	}
	switch {
	case u.Scheme == "https":
		return URL{}, ErrHTTPS
	case u.Scheme != "http" || u.Opaque != "":
		return URL{}, errors.New("want http://HOST:PORT")
	case u.User != nil:
		return URL{}, errors.New("credentials in the URL are not supported")
	}
	if err := CheckHost(u.Hostname()); err != nil {
		return URL{}, err
	}
	addr := u.Host
	if port := u.Port(); port != "" || strings.HasSuffix(u.Host, ":") {
		if _, err := ParsePort(port); err != nil {
			return URL{}, err
		}
	} else {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	target := u.EscapedPath()
	if target == "" {
		target = "/"
	}
	if u.RawQuery != "" {
		target += "?" + u.RawQuery
	}
	return URL{Addr: addr, Host: u.Host, Target: target}, nil
}

// CheckHost accepts an IP address or a DNS name.
func CheckHost(host string) error {
	if host == "" {
		return errors.New("no host")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if len(host) > 253 {
		return errors.New("host name longer than 253 characters")
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
		}
	}
	return nil
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

// TCP dials addr over TCP, each dial bounded by timeout as well as by its
// context.
func TCP(addr string, timeout time.Duration) func(context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}
