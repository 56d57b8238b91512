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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	listen      string   // the address to bind
	addr        net.Addr // the address bound
	log         *slog.Logger
	ready, live Check
	reg         *metrics.Registry
}

// New returns the health server for addr (such as :15022, an IP address's port or localhost's), unbound: it
// touches nothing until Listen. ready says whether the pod may be sent
// traffic, live whether the container is fit to keep running; a nil live
// always says so.
func New(addr string, ready, live Check, reg *metrics.Registry, log *slog.Logger) *Server {
	if live == nil {
		live = func() (bool, string) { return true, "" }
	}
	return &Server{listen: addr, ready: ready, live: live, reg: reg, log: log}
}

// Listen binds the server's address; Serve and Close follow it.
func (s *Server) Listen() error {
	ln, err := http1.ListenTCP(s.listen)
	if err != nil {
		return fmt.Errorf("health server: %w", err)
	}
	s.addr = ln.Addr()
	s.srv = http1.NewServer(newFairListener(ln, maxConns, perSource), http1.Config{
		Name:         "health server",
		Handler:      s.answer,
		MaxHead:      maxHeader,
		Spare:        spareBufs,
		HeadTimeout:  headerTimeout,
		IdleTimeout:  idleTimeout,
		WriteTimeout: writeTimeout,
		Grace:        closeGrace,
		Log:          s.log,
	})
	return nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.addr }

// Serve serves until Close.
func (s *Server) Serve() error { return s.srv.Serve() }

// Close stops the server and its connections.
func (s *Server) Close() error {
	if s.srv == nil { // never bound
		return nil
	}
	return s.srv.Close()
}

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
// source address (perSource), without ever making a new connection wait:
// at a cap it closes the connection, of the same source or of all, that
// has gone longest without sending a byte (since its accept, if it has
// sent none). A listener that blocked at its cap instead would queue a
// probe in the kernel's backlog behind a flood of connections that trickle
// their headers, each holding a slot for the whole header timeout.
//
// The kubelet sends a probe's whole request with its connect, and the
// probe is answered as soon as it is read: its connection is the newest
// at its accept and again at its read, so it is the last to be closed. From
// its read to its answer's write it is never closed (http1.Answerer): on a
// starved node that gap took long enough for a thousand trickling clients
// to have all sent a byte since, and the probe was closed unanswered.
// Among connections that send nothing, the oldest goes; among those that
// trickle bytes, the one that sent its last longest ago. Choosing among
// equals instead (the oldest of the source holding the most, when a
// thousand sources held one each) closed a probe as often as not before
// it was read.
type fairListener struct {
	net.Listener
	max, perSource int

	mu    sync.Mutex
	n     int
	bySrc map[netip.Addr][]*fairConn
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
	fc.last.Store(time.Now().UnixNano())
	l.mu.Lock()
	var evict *fairConn
	switch {
	case len(l.bySrc[fc.src]) >= l.perSource:
		evict = l.quietest(l.bySrc[fc.src])
	case l.n >= l.max:
		evict = l.quietest(nil)
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

// quietest is the connection of cs (of all, if cs is nil) that has gone
// longest without sending a byte. What a connection's goroutine has read
// tells late: under a flood the accept loop runs on (the supervisor has one
// P) and the goroutines of connections whose bytes arrived are woken tens
// of milliseconds later. So the bytes waiting in the socket count too: a
// connection that has some sent them now, which makes it the newest, and
// so does one being answered. When every one has bytes waiting or is being
// answered, the one that was quietest goes all the same: a cap that a
// flood of talkers could lift would not bound the goroutines. mu is held.
func (l *fairListener) quietest(cs []*fairConn) *fairConn {
	var first *fairConn
	for range l.n {
		var q *fairConn
		find := func(cs []*fairConn) {
			for _, c := range cs {
				if q == nil || c.last.Load() < q.last.Load() {
					q = c
				}
			}
		}
		if cs != nil {
			find(cs)
		} else {
			for _, cs := range l.bySrc {
				find(cs)
			}
		}
		if q == nil || !q.answering.Load() && !q.waiting() {
			return q
		}
		if first == nil {
			first = q
		}
		q.last.Store(time.Now().UnixNano())
	}
	return first
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
	l         *fairListener
	src       netip.Addr
	last      atomic.Int64 // when it last sent a byte, or its accept (Unix ns)
	answering atomic.Bool  // its request read, its answer not yet written
}

// Answering is the server's word that c's request has been read and is
// being answered (true), or that its answer is written (false).
func (c *fairConn) Answering(b bool) { c.answering.Store(b) }

// waiting reports whether bytes that c's client sent wait to be read.
func (c *fairConn) waiting() bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

func (c *fairConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *fairConn) Close() error {
	c.l.mu.Lock()
	c.l.dropLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
