package health

import (
	"bytes"
	"errors"
	"fmt"
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
	maxHeader     = 8 << 10
	maxConns      = 128
	// perSource is far above what the kubelet (a few probes at once, from
	// the node's address) or a scraper opens.
	perSource = 16
	// spareBufs request buffers are kept for the next connections: the
	// kubelet opens one per probe, and a burst's buffers beyond these go
	// back to the collector.
	spareBufs = 4
)

// Check answers a probe: ok, or why not.
type Check func() (ok bool, why string)

// Server is the TCP health server. It has no endpoint that changes anything:
// under Istio, redirected traffic reaches local ports from 127.0.0.6, so a
// loopback check would protect nothing, and stopping goes through the control
// socket alone.
//
// It speaks just enough HTTP/1.1 for probes and scrapes (GET and HEAD of
// three paths, keep-alive, pipelining, no request bodies) and answers a probe
// without allocating: net/http allocated 21 objects (about 2 kB) per probe,
// so that a burst of probes ran the collector about a hundred times a
// second, and those collections left the runtime's per-size-class sweep
// metadata resident for good.
type Server struct {
	ln          *fairListener
	ready, live Check
	reg         *metrics.Registry
	bufs        chan []byte

	// onOpen and onClose, when set (tests), see each connection served.
	onOpen, onClose func()
}

// Listen binds addr (such as :15022) and returns a server ready to Serve.
// ready says whether the pod may be sent traffic, live whether the
// container is fit to keep running; a nil live always says so.
func Listen(addr string, ready, live Check, reg *metrics.Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health server: %w", err)
	}
	if live == nil {
		live = func() (bool, string) { return true, "" }
	}
	return &Server{
		ln:    newFairListener(ln, maxConns, perSource),
		ready: ready,
		live:  live,
		reg:   reg,
		bufs:  make(chan []byte, spareBufs),
	}, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Close.
func (s *Server) Serve() error {
	for {
		c, err := http1.Accept(s.ln, nil)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("health server: %w", err)
		}
		go s.serve(c)
	}
}

// Close stops the server and its connections.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.ln.closeAll()
	return err
}

// buffer is a request buffer of maxHeader bytes plus room for a response.
func (s *Server) buffer() []byte {
	select {
	case b := <-s.bufs:
		return b
	default:
		return make([]byte, maxHeader+512)
	}
}

func (s *Server) release(b []byte) {
	select {
	case s.bufs <- b:
	default:
	}
}

// serve answers the requests of one connection in turn, until the client
// closes it, asks to, errs or times out: headerTimeout from a request's
// first byte (from the accept, for the first) and idleTimeout between
// requests.
func (s *Server) serve(c net.Conn) {
	if s.onOpen != nil {
		s.onOpen()
	}
	buf := s.buffer()
	defer func() {
		c.Close()
		s.release(buf)
		if s.onClose != nil {
			s.onClose()
		}
	}()
	in, out := buf[:maxHeader], buf[maxHeader:maxHeader]
	n := 0 // bytes of in that are read and not yet answered
	// The first head is timed from the accept; later ones may keep the
	// connection idle first.
	for idle := time.Duration(0); ; idle = idleTimeout {
		end, held, err := http1.ReadHead(c, in, n, headerTimeout, idle)
		n = held
		if errors.Is(err, http1.ErrHeadTooLarge) {
			s.send(c, out, http1.Request{Close: true}, 431, "", "request header too large\n")
			return
		}
		if err != nil {
			return
		}
		// A probe or a scrape never sends a body, and this server would
		// read one as the next request.
		req, ok := http1.ParseRequest(in[:end])
		if !ok || req.Body {
			s.send(c, out, http1.Request{Close: true}, 400, "", "bad request\n")
			return
		}
		if !s.answer(c, out, req) || req.Close {
			return
		}
		n = copy(in, in[end:n]) // pipelined requests
	}
}

// answer routes one request and writes its response; false if the write
// failed.
func (s *Server) answer(c net.Conn, out []byte, r http1.Request) bool {
	var check Check
	var name string
	switch string(r.Path) {
	case "/healthz/ready":
		check, name = s.ready, "ready"
	case "/healthz/live":
		check, name = s.live, "live"
	case "/metrics":
	default:
		return s.send(c, out, r, 404, "", "404 page not found\n")
	}
	if string(r.Method) != "GET" && string(r.Method) != "HEAD" {
		return s.send(c, out, r, 405, "Allow: GET, HEAD\r\n", "method not allowed\n")
	}
	if check == nil {
		var body bytes.Buffer // a scrape, seconds apart: it may allocate
		s.reg.WriteTo(&body)
		return s.send(c, out, r, 200, "", body.String())
	}
	if ok, why := check(); !ok {
		return s.send(c, out, r, 503, "", "not ", name, ": ", why, "\n")
	}
	return s.send(c, out, r, 200, "", name, "\n")
}

// send writes a response whose body is the concatenation of body, built in
// out (which grows beyond its capacity only for a large body); extra is
// more header lines. It reports whether the write succeeded.
func (s *Server) send(c net.Conn, out []byte, r http1.Request, code int, extra string, body ...string) bool {
	ctype := "text/plain; charset=utf-8"
	if string(r.Path) == "/metrics" && code == 200 {
		ctype = "text/plain; version=0.0.4; charset=utf-8"
	}
	size := 0
	for _, p := range body {
		size += len(p)
	}
	b := http1.AppendHead(out[:0], code, ctype, size, extra, r.Close || code == 400 || code == 431)
	if string(r.Method) != "HEAD" {
		for _, p := range body {
			b = append(b, p...)
		}
	}
	c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.Write(b)
	return err == nil
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

	mu     sync.Mutex
	n      int
	bySrc  map[netip.Addr][]*fairConn // oldest first
	closed bool                       // by closeAll: no more connections
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
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return nil, net.ErrClosed
	}
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

// closeAll closes every connection handed out, and any accepted later.
func (l *fairListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	var all []*fairConn
	for _, cs := range l.bySrc {
		all = append(all, cs...)
	}
	l.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
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
