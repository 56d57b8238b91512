package http1

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"
)

// URL is an http:// URL taken apart for a Client: the address to dial, the
// Host header, and the request target (path and query).
type URL struct {
	Addr, Host, Target string
}

// ParseURL takes apart an http:// URL, such as Envoy's admin address or a
// readiness URL; a missing port is 80. Other schemes are refused: every
// server the supervisor asks is local and speaks plain HTTP.
func ParseURL(raw string) (URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return URL{}, err
	}
	if u.Scheme != "http" || u.Host == "" || u.User != nil {
		return URL{}, fmt.Errorf("%q: want http://HOST[:PORT][/PATH]", raw)
	}
	addr := u.Host
	if u.Port() == "" {
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

// TCP dials addr over TCP, each dial bounded by timeout as well as by its
// context.
func TCP(addr string, timeout time.Duration) func(context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}
