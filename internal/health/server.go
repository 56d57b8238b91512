package health

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

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
	maxHeader     = 8 << 10
	maxConns      = 128
	// perSource is far above what the kubelet (a few probes at once, from
	// the node's address) or a scraper opens.
	perSource = 16
)

// Check answers a probe: ok, or why not.
type Check func() (ok bool, why string)

// Server is the TCP health server. It has no endpoint that changes anything:
// under Istio, redirected traffic reaches local ports from 127.0.0.6, so a
// loopback check would protect nothing, and stopping goes through the control
// socket alone.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr (such as :15022) and returns a server ready to Serve.
// ready says whether the pod may be sent traffic, live whether the
// container is fit to keep running; a nil live always says so.
func Listen(addr string, ready, live Check, reg *metrics.Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health server: %w", err)
	}
	mux := http.NewServeMux()
	if live == nil {
		live = func() (bool, string) { return true, "" }
	}
	mux.HandleFunc("GET /healthz/ready", probe(ready, "ready"))
	mux.HandleFunc("GET /healthz/live", probe(live, "live"))
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		reg.WriteTo(w)
	})
	return &Server{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: headerTimeout,
			ReadTimeout:       headerTimeout,
			WriteTimeout:      5 * time.Second,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    maxHeader,
		},
		ln: newFairListener(ln, maxConns, perSource),
	}, nil
}

// probe answers a probe from check: 200 and name, or 503 and why not.
func probe(check Check, name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		ok, why := check()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not %s: %s\n", name, why)
			return
		}
		fmt.Fprintln(w, name)
	}
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Close.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("health server: %w", err)
	}
	return nil
}

// Close stops the server and its connections.
func (s *Server) Close() error { return s.srv.Close() }

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
