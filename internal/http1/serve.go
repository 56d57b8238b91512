package http1

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
)

// Handler answers one request. body is an empty buffer of the connection's
// to append the answer's body to, so that an answer need not allocate. ctx
// ends when the server closes and, with Config.CancelOnHangup, when the
// client goes away.
type Handler func(ctx context.Context, r *Request, body []byte) Answer

// Answer is what a Handler answers.
type Answer struct {
	Code  int
	Type  string // Content-Type; "" is plain text
	Extra string // more header lines, each ending in CRLF
	Body  []byte // left out of the answer to HEAD, and counted in its Content-Length
}

// Config is what a Server serves, and its bounds.
type Config struct {
	Name    string // the server's, for its errors and logs: "health server"
	Handler Handler
	// Refuse renders the answer to a head the server refuses before any
	// Handler sees it: 400 when it cannot be read, 431 when it is larger
	// than MaxHead. Nil: why, as plain text.
	Refuse func(code int, why string, body []byte) Answer
	// ConnContext, when set, gives a connection's context from the
	// server's, once, at its accept: the control socket adds the peer's
	// credentials there.
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	// CancelOnHangup reads the connection while a request is answered,
	// so that a client that goes away ends the request's context (a long
	// poll it gave up). It costs a goroutine and a context per request; without
	// it, answering allocates nothing.
	CancelOnHangup bool
	// MaxHead bounds a request head.
	MaxHead int
	// Spare is how many ended connections' buffers are kept for the next
	// ones: the kubelet opens a connection per probe, and a burst's
	// buffers beyond these go back to the collector. Zero keeps none.
	Spare int
	// HeadTimeout bounds a head from its first byte (from the accept, for
	// the first), IdleTimeout the wait for that byte between requests,
	// WriteTimeout the write of an answer once it is ready, and Grace how
	// long Close waits for answers in flight.
	HeadTimeout, IdleTimeout, WriteTimeout, Grace time.Duration
	// Log is told of accept retries and of a Handler's panic.
	Log *slog.Logger
}

// Server serves HTTP/1.1 on a listener: one goroutine per connection, which
// reads a head, has the Handler answer it and writes the answer, in turn,
// keeping the connection between requests (pipelined ones too) until the
// client closes it or asks to, speaks HTTP/1.0, sends a body (which would be
// read as the next request), errs or times out, or the server closes. A
// Handler's panic ends its connection, not the process.
type Server struct {
	cfg    Config
	ln     net.Listener
	base   context.Context // every connection's, ended at Close
	cancel context.CancelFunc

	mu      sync.Mutex
	conns   map[net.Conn]bool // the open connections: true while one answers a request
	served  int               // connections accepted
	closing bool
	gone    chan struct{} // closed once closing and conns is empty
	settled bool          // gone is closed

	spare chan *connBufs // buffers of ended connections, for the next ones
}

// NewServer returns a server of ln, ready to Serve.
func NewServer(ln net.Listener, cfg Config) *Server {
	base, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:    cfg,
		ln:     ln,
		base:   base,
		cancel: cancel,
		conns:  make(map[net.Conn]bool),
		gone:   make(chan struct{}),
		spare:  make(chan *connBufs, cfg.Spare),
	}
}

// Serve serves until Close, and then returns nil.
func (s *Server) Serve() error {
	for {
		c, err := accept(s.ln, func(err error, wait time.Duration) {
			s.cfg.Log.Warn(s.cfg.Name+": cannot accept a connection; retrying", "in", wait, "err", err)
		})
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.cfg.Name, err)
		}
		if s.track(c) {
			go s.serve(c)
		}
	}
}

// Close stops serving. Requests being answered end their context, and
// their answers are delivered (the request that ended the job gets its
// 202), within Grace; then what is left is cut. Connections between
// requests are closed at once.
func (s *Server) Close() error {
	s.cancel()
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed before
	}
	s.mu.Lock()
	s.closing = true
	for c, busy := range s.conns {
		if !busy {
			c.Close()
		}
	}
	s.settle()
	s.mu.Unlock()
	t := time.NewTimer(s.cfg.Grace)
	defer t.Stop()
	select {
	case <-s.gone:
	case <-t.C:
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	}
	return err
}

// Conns is how many connections the server has accepted, and how many of
// them are open.
func (s *Server) Conns() (served, open int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served, len(s.conns)
}

// track adds c to the open connections, or closes it if the server is
// closing.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served++
	if s.closing {
		c.Close()
		return false
	}
	s.conns[c] = false
	return true
}

// Answerer is a connection that is told when its request has been read
// and when its answer has been written: a listener that closes connections
// at a cap must not take one whose client has said all and waits for the
// server (health's takes the one quietest longest).
type Answerer interface {
	Answering(bool)
}

// busy marks c as answering a request, or as between requests, and tells
// an Answerer. It reports false when the server is closing: then the
// connection must end (Close has closed it already if it was between
// requests).
func (s *Server) busy(c net.Conn, busy bool) bool {
	if a, ok := c.(Answerer); ok {
		a.Answering(busy)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = busy
	return true
}

// forget closes c and drops it from the open connections.
func (s *Server) forget(c net.Conn) {
	c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	s.settle()
}

// settle tells Close that the last connection has ended. mu is held.
func (s *Server) settle() {
	if s.closing && len(s.conns) == 0 && !s.settled {
		s.settled = true
		close(s.gone)
	}
}

// connBufs is a connection's buffers, kept for the next connection when it
// ends.
type connBufs struct {
	in   []byte // the request head being read, MaxHead bytes
	n    int    // bytes of in read and not yet answered
	body []byte // the Handler's
	out  []byte // the answer being written
	req  Request
}

// Room for an answer: its head and a probe's body fit without growing.
const (
	bodyRoom = 256
	outRoom  = 512
)

func (s *Server) buffers() *connBufs {
	select {
	case cn := <-s.spare:
		return cn
	default:
	}
	b := make([]byte, s.cfg.MaxHead+bodyRoom+outRoom)
	in, rest := b[:s.cfg.MaxHead:s.cfg.MaxHead], b[s.cfg.MaxHead:]
	return &connBufs{in: in, body: rest[:0:bodyRoom], out: rest[bodyRoom:bodyRoom]}
}

// release keeps cn for the next connection, unless an answer grew its
// buffers (a scrape), or enough are kept.
func (s *Server) release(cn *connBufs) {
	if cap(cn.body) > bodyRoom || cap(cn.out) > outRoom {
		return
	}
	*cn = connBufs{in: cn.in, body: cn.body[:0], out: cn.out[:0]}
	select {
	case s.spare <- cn:
	default:
	}
}

// serve answers the requests of one connection in turn.
func (s *Server) serve(c net.Conn) {
	cn := s.buffers()
	defer func() {
		// As net/http does: a bug in answering one request must not take
		// the process, PID 1 of the proxy's container, down.
		if v := recover(); v != nil {
			s.cfg.Log.Error(s.cfg.Name+": panic serving a request", "panic", v, "stack", string(debug.Stack()))
			cn = nil // its buffers may be in any state
		}
		s.forget(c)
		if cn != nil {
			s.release(cn)
		}
	}()
	ctx := s.base
	if s.cfg.ConnContext != nil {
		ctx = s.cfg.ConnContext(ctx, c)
	}
	// The first head is timed from the accept; later ones may keep the
	// connection idle first.
	for idle := time.Duration(0); ; idle = s.cfg.IdleTimeout {
		var end int
		var err error
		end, cn.n, err = readRequestHead(c, cn.in, cn.n, s.cfg.HeadTimeout, idle)
		if errors.Is(err, errHeadTooLarge) {
			s.refuse(c, cn, 431, "request head too large")
			return
		}
		if err != nil {
			return
		}
		var ok bool
		if cn.req, ok = ParseRequest(cn.in[:end]); !ok {
			s.refuse(c, cn, 400, "malformed request head")
			return
		}
		if !s.busy(c, true) {
			return
		}
		done := s.answer(ctx, c, cn)
		cn.n = copy(cn.in, cn.in[end:cn.n]) // pipelined requests
		if done || !s.busy(c, false) {
			return
		}
	}
}

// answer has the Handler answer cn.req and writes its answer; done
// reports that the connection ends: the client asked, sent a body, went
// away, or the server is closing.
//
// With CancelOnHangup it reads the connection meanwhile, so that a client
// that goes away ends the request's context. That read takes one byte at most, which
// stays in cn.in: it is the start of a pipelined request. The answer is
// written before that read is ended: ending it waits for the reading
// goroutine, and a goroutine that the request woke (the stop that a job's
// completion starts) would run first, with the answer held back behind it.
func (s *Server) answer(ctx context.Context, c net.Conn, cn *connBufs) (done bool) {
	r := &cn.req
	var read chan error
	if s.cfg.CancelOnHangup {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		c.SetReadDeadline(time.Time{})
		next := cn.in[cn.n:min(cn.n+1, len(cn.in))]
		read = make(chan error, 1)
		go func() {
			n, err := c.Read(next)
			if err != nil {
				cancel()
			}
			cn.n += n // read below, once this is sent
			read <- err
		}()
	}
	a := s.cfg.Handler(ctx, r, cn.body[:0])
	done = r.Close || r.Body || ctx.Err() != nil
	done = !s.write(c, cn, a, string(r.Method) == "HEAD", done) || done
	if read != nil {
		c.SetReadDeadline(time.Unix(1, 0)) // ends the read, with what it got
		err := <-read
		done = done || err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	}
	return done
}

// refuse answers a head the server will not read, and the connection ends.
func (s *Server) refuse(c net.Conn, cn *connBufs, code int, why string) {
	var a Answer
	if s.cfg.Refuse != nil {
		a = s.cfg.Refuse(code, why, cn.body[:0])
	} else {
		a = Answer{Code: code, Body: append(append(cn.body[:0], why...), '\n')}
	}
	s.write(c, cn, a, false, true)
}

// write sends the answer a, without its body when head, asking the client
// to close the connection after it when end is set. A client that does not
// read it has WriteTimeout.
func (s *Server) write(c net.Conn, cn *connBufs, a Answer, head, end bool) bool {
	ctype := a.Type
	if ctype == "" {
		ctype = "text/plain; charset=utf-8"
	}
	cn.out = appendHead(cn.out[:0], a.Code, ctype, len(a.Body), a.Extra, end)
	if !head {
		cn.out = append(cn.out, a.Body...)
	}
	c.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	_, err := c.Write(cn.out)
	return err == nil
}

// appendHead appends a response's head to b: the status line, the headers
// every answer of the supervisor carries (Date, Content-Type, no caching,
// no sniffing, Content-Length), extra (whole header lines, each ending in
// CRLF), Connection: close when close is set, and the blank line.
func appendHead(b []byte, code int, ctype string, length int, extra string, close bool) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, statusText(code)...)
	b = append(b, "\r\nDate: "...)
	b = time.Now().UTC().AppendFormat(b, "Mon, 02 Jan 2006 15:04:05 GMT")
	b = append(b, "\r\nContent-Type: "...)
	b = append(b, ctype...)
	b = append(b, "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(length), 10)
	b = append(b, "\r\n"...)
	b = append(b, extra...)
	if close {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

// statusText is the reason phrase of the codes the supervisor answers with.
func statusText(code int) string {
	switch code {
	case 200:
		return "OK"
	case 202:
		return "Accepted"
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	}
	return "Unknown"
}

// errHeadTooLarge is a request head that does not fit the buffer: a server
// answers 431 and closes the connection.
var errHeadTooLarge = errors.New("request head too large")

// readRequestHead reads from c into in, which holds n bytes read before (the start
// of a pipelined request), until in holds a whole request head; it returns
// the head's length and how many bytes in holds. The head must arrive within
// head of its first byte. idle is how long the connection may wait for that
// first byte between requests; zero means a first request, whose head is
// timed from now (the accept).
func readRequestHead(c net.Conn, in []byte, n int, head, idle time.Duration) (end, held int, err error) {
	waiting := n == 0 && idle > 0
	if waiting {
		c.SetReadDeadline(time.Now().Add(idle))
	} else {
		c.SetReadDeadline(time.Now().Add(head))
	}
	for {
		if end := HeadEnd(in[:n]); end >= 0 {
			return end, n, nil
		}
		if n == len(in) {
			return -1, n, errHeadTooLarge
		}
		m, err := c.Read(in[n:])
		if m > 0 && waiting {
			waiting = false
			c.SetReadDeadline(time.Now().Add(head))
		}
		n += m
		if err != nil && m == 0 {
			return -1, n, err
		}
	}
}
