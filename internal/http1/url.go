package http1

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// URL is a URL taken apart for a Client: the network and address to dial,
// the Host header, and the request target (path and query).
type URL struct {
	Network, Addr, Host, Target string
}

// ParseURL takes apart an http:// URL, such as Envoy's admin address or a
// readiness URL (a missing port is 80), or unix:///PATH, plain HTTP over the
// unix socket at PATH (Envoy's admin.address.pipe), whose requests go to /
// with Host localhost. Other schemes are refused: every server the
// supervisor asks is local and speaks plain HTTP.
func ParseURL(raw string) (URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return URL{}, err
	}
	if u.Scheme == "unix" {
		if u.Host != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || !strings.HasPrefix(u.Path, "/") {
			return URL{}, fmt.Errorf("%q: want unix:///PATH, an absolute path", raw)
		}
		return URL{Network: "unix", Addr: u.Path, Host: "localhost", Target: "/"}, nil
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
	return URL{Network: "tcp", Addr: addr, Host: u.Host, Target: target}, nil
}

// Dial dials the URL's address, each dial bounded by timeout as well as by
// its context.
func (u URL) Dial(timeout time.Duration) func(context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, u.Network, u.Addr) }
}

// TCP dials addr over TCP, each dial bounded by timeout as well as by its
// context.
func TCP(addr string, timeout time.Duration) func(context.Context) (net.Conn, error) {
	return URL{Network: "tcp", Addr: addr}.Dial(timeout)
}
