package health

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/metrics"
)

// Bounds on the health server. Probes are tiny and the kubelet's timeout is
// seconds, so anything slower than this is not a probe; it is closed rather
// than allowed to hold a goroutine and a file descriptor. The kubelet opens a
// connection per probe, so an idle connection is kept only briefly: long
// enough for a scraper's next request, too short for a few clients to park
// on every slot and starve the probes.
//
// The port is outside Istio's capture, so anything that reaches the pod's IP
// can open connections to it. A probe must never wait behind them: see
// fairListener.
const (
	headerTimeout = 2 * time.Second
	idleTimeout   = time.Second
	writeTimeout  = 5 * time.Second
	closeGrace    = time.Second
	maxHeader     = 8 << 10
	maxConns      = 128
	// perSource is far above what the kubelet (a few probes at once, from
	// the node's address) or a scraper opens.
	perSource = 16
	// spareBufs connections' buffers are kept for the next connections:
	// the kubelet opens one per probe.
	spareBufs = 4
)

// Check answers a probe: ok, or why not.
type Check func() (ok bool, why string)

// Server is the TCP health server. It has no endpoint that changes anything:
// under Istio, redirected traffic reaches local ports from 127.0.0.6, so a
// loopback check would protect nothing, and stopping goes through the control
// socket alone.
//
// It answers GET and HEAD of three paths, and a probe without allocating:
// net/http allocated 21 objects (about 2 kB) per probe, so that a burst of
// probes ran the collector about a hundred times a second, and those
// collections left the runtime's per-size-class sweep metadata resident for
// good.
type Server struct {
	srv         *http1.Server
	addr        net.Addr
	ready, live Check
	reg         *metrics.Registry
}

// Listen binds addr (such as :15022) and returns a server ready to Serve.
// ready says whether the pod may be sent traffic, live whether the
// container is fit to keep running; a nil live always says so.
func Listen(addr string, ready, live Check, reg *metrics.Registry, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health server: %w", err)
	}
	if live == nil {
		live = func() (bool, string) { return true, "" }
	}
	s := &Server{addr: ln.Addr(), ready: ready, live: live, reg: reg}
	s.srv = http1.NewServer(newFairListener(ln, maxConns, perSource), http1.Config{
		Name:         "health server",
		Handler:      s.answer,
		MaxHead:      maxHeader,
		Spare:        spareBufs,
		HeadTimeout:  headerTimeout,
		IdleTimeout:  idleTimeout,
		WriteTimeout: writeTimeout,
		Grace:        closeGrace,
		Log:          log,
	})
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.addr }

// Serve serves until Close.
func (s *Server) Serve() error { return s.srv.Serve() }

// Close stops the server and its connections.
func (s *Server) Close() error { return s.srv.Close() }

// answer routes one request, building its body in body.
func (s *Server) answer(_ context.Context, r *http1.Request, body []byte) http1.Answer {
	// A probe or a scrape never sends a body; the connection ends after
	// this, since the body would be read as the next request.
	if r.Body {
		return text(400, body, "bad request: a body\n")
	}
	var check Check
	var name string
	switch string(r.Path) {
	case "/healthz/ready":
		check, name = s.ready, "ready"
	case "/healthz/live":
		check, name = s.live, "live"
	case "/metrics":
	default:
		return text(404, body, "404 page not found\n")
	}
	if string(r.Method) != "GET" && string(r.Method) != "HEAD" {
		a := text(405, body, "method not allowed\n")
		a.Extra = "Allow: GET, HEAD\r\n"
		return a
	}
	if check == nil {
		b := bytes.NewBuffer(body) // a scrape, seconds apart: it may allocate
		s.reg.WriteTo(b)
		return http1.Answer{Code: 200, Type: "text/plain; version=0.0.4; charset=utf-8", Body: b.Bytes()}
	}
	if ok, why := check(); !ok {
		return text(503, body, "not ", name, ": ", why, "\n")
	}
	return text(200, body, name, "\n")
}

// text is a plain-text answer whose body is the concatenation of parts,
// appended to body.
func text(code int, body []byte, parts ...string) http1.Answer {
	for _, p := range parts {
		body = append(body, p...)
	}
	return http1.Answer{Code: code, Body: body}
}

// fairListener bounds the connections it hands out, in all (max) and per
// source address (perSource), without ever making a new connection wait: it
// closes the oldest connection of the same source when that source is at its
// cap, or of the source holding the most when all are taken. A listener that
// blocked at its cap instead would queue a probe in the kernel's backlog
// behind a flood of connections that trickle their headers, each holding a
// slot for the whole header timeout; here a flood from one address only ever
// evicts itself, and a new connection is served at once.
type fairListener struct {
	net.Listener
	max, perSource int

	mu    sync.Mutex
	n     int
	bySrc map[netip.Addr][]*fairConn // oldest first
}

func newFairListener(ln net.Listener, max, perSource int) *fairListener {
	return &fairListener{Listener: ln, max: max, perSource: perSource, bySrc: map[netip.Addr][]*fairConn{}}
}

func (l *fairListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fc := &fairConn{Conn: c, l: l, src: sourceOf(c)}
	l.mu.Lock()
	var evict *fairConn
	switch {
	case len(l.bySrc[fc.src]) >= l.perSource:
		evict = l.bySrc[fc.src][0]
	case l.n >= l.max:
		evict = l.heaviest()
	}
	if evict != nil {
		l.dropLocked(evict)
	}
	l.bySrc[fc.src] = append(l.bySrc[fc.src], fc)
	l.n++
	l.mu.Unlock()
	if evict != nil {
		// Its server goroutine sees the error and ends the connection.
		evict.Conn.Close()
	}
	return fc, nil
}

// heaviest is the oldest connection of the source that holds the most.
func (l *fairListener) heaviest() *fairConn {
	var top []*fairConn
	for _, cs := range l.bySrc {
		if len(cs) > len(top) {
			top = cs
		}
	}
	return top[0]
}

// dropLocked forgets c, if it is not forgotten already.
func (l *fairListener) dropLocked(c *fairConn) {
	cs := l.bySrc[c.src]
	i := slices.Index(cs, c)
	if i < 0 {
		return
	}
	if len(cs) == 1 {
		delete(l.bySrc, c.src)
	} else {
		l.bySrc[c.src] = slices.Delete(cs, i, i+1)
	}
	l.n--
}

// sourceOf is the connection's remote address; every address that is not
// TCP shares one bucket.
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

type fairConn struct {
	net.Conn
	l   *fairListener
	src netip.Addr
}

func (c *fairConn) Close() error {
	c.l.mu.Lock()
	c.l.dropLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
