package fakeenvoy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// dataListener is one data-plane listener: a TCP proxy or an HTTP connection manager
// whose every request gets a 200. Its connections are real, and they alone move the
// downstream_cx stats.
type dataListener struct {
	e         *Envoy
	cfg       Listener
	addr      netip.AddrPort
	statScope string // "listener.127.0.0.1_15001"
	sock      *socket
	active    atomic.Int64
	cx        cxStats // the listener's own, plus http.<prefix> for HTTP

	// Guarded by e.mu.
	ln         net.Listener
	stopped    bool
	drainStart time.Time // zero while no drain covers this listener
	conns      map[*dataConn]struct{}
	workers    []cxStats
	next       int // round robin over workers, as the kernel spreads accepts
}

func newDataListener(e *Envoy, cfg Listener, sock *socket) *dataListener {
	return &dataListener{
		e:         e,
		cfg:       cfg,
		addr:      sock.addr,
		statScope: listenerStatScope(sock.addr),
		sock:      sock,
		conns:     make(map[*dataConn]struct{}),
	}
}

func (l *dataListener) httpScope() string { return "http." + l.cfg.StatPrefix }

// start begins listening, which is what Envoy does when its workers start; before
// that the port is bound but refuses connections.
func (l *dataListener) start() error {
	e := l.e
	scopes := []string{l.statScope}
	if !l.cfg.TCP {
		scopes = append(scopes, l.httpScope())
	}
	workers := make([]cxStats, e.opts.Concurrency)
	for i := range workers {
		workers[i] = e.stats.cx(fmt.Sprintf("%s.worker_%d", l.statScope, i))
	}
	e.mu.Lock()
	l.cx = e.stats.cx(scopes...)
	l.workers = workers
	skip := l.stopped || e.shutting
	e.mu.Unlock()
	if skip {
		return nil
	}
	ln, err := l.sock.listen()
	if err != nil {
		return fmt.Errorf("listener %s: %w", l.cfg.Name, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.stopped || e.shutting {
		ln.Close()
		return nil
	}
	l.ln = ln
	e.wg.Add(1)
	go l.accept(ln)
	return nil
}

func (l *dataListener) accept(ln net.Listener) {
	defer l.e.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		c := l.track(nc)
		if c == nil {
			continue
		}
		l.e.wg.Add(1)
		go func() {
			defer l.e.wg.Done()
			defer l.untrack(c)
			if l.cfg.TCP {
				l.serveTCP(c)
			} else {
				l.serveHTTP(c)
			}
		}()
	}
}

// dataConn is one accepted connection.
type dataConn struct {
	nc    net.Conn
	stats cxStats

	due time.Time // when a drain tells this connection to close; guarded by l.e.mu
}

func (l *dataListener) track(nc net.Conn) *dataConn {
	e := l.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shutting {
		nc.Close()
		return nil
	}
	w := l.workers[l.next%len(l.workers)]
	l.next++
	c := &dataConn{nc: nc, stats: cxStats{
		active: append(append([]*metric(nil), l.cx.active...), w.active...),
		total:  append(append([]*metric(nil), l.cx.total...), w.total...),
	}}
	c.stats.opened()
	l.active.Add(1)
	l.conns[c] = struct{}{}
	if !l.cfg.TCP && !l.drainStart.IsZero() {
		l.scheduleDrain(c)
	}
	return c
}

func (l *dataListener) untrack(c *dataConn) {
	e := l.e
	e.mu.Lock()
	delete(l.conns, c)
	e.mu.Unlock()
	c.nc.Close()
	c.stats.closed()
	l.active.Add(-1)
}

// serveTCP stands in for tcp_proxy with an echoing upstream. It never looks at a
// drain: the connection lasts until the peer closes it.
func (l *dataListener) serveTCP(c *dataConn) {
	io.Copy(c.nc, c.nc)
}

// serveHTTP is a minimal HTTP/1.1 connection manager: every request gets a 200, and a
// drain (or a failed health check) puts "connection: close" on the next response. As in
// Envoy, that is all a drain does to an HTTP/1 connection: a keep-alive connection with
// no request in flight stays open (counted in downstream_cx_active, not in
// downstream_rq_active) until its client sends again or closes it. A request is active
// from its headers to the end of its response, its body's upload included.
func (l *dataListener) serveHTTP(c *dataConn) {
	scope := l.httpScope()
	rqActive := l.e.stats.gauge(scope + ".downstream_rq_active")
	rqTotal := l.e.stats.counter(scope + ".downstream_rq_total")
	drainClose := l.e.stats.counter(scope + ".downstream_cx_drain_close")
	br := bufio.NewReader(c.nc)
	for {
		req, err := http.ReadRequest(br)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			io.WriteString(c.nc, httpResponse(http.StatusBadRequest, "Bad Request", false, true))
			return
		}
		// Envoy counts a request when its headers are decoded, so a client that has its
		// response always sees itself in downstream_rq_total.
		rqTotal.add(1)
		rqActive.add(1)
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
		draining := l.drainCloseDue(c)
		closing := req.Close || draining
		body := fmt.Sprintf("fake-envoy listener %s\n", l.cfg.Name)
		_, werr := io.WriteString(c.nc, httpResponse(http.StatusOK, body, req.Method == http.MethodHead, closing))
		rqActive.add(-1)
		if werr != nil {
			return
		}
		if closing {
			if draining {
				drainClose.add(1)
			}
			return
		}
	}
}

func httpResponse(code int, body string, head, closing bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", code, http.StatusText(code))
	fmt.Fprintf(&b, "content-length: %d\r\n", len(body))
	b.WriteString("content-type: text/plain\r\n")
	fmt.Fprintf(&b, "date: %s\r\n", time.Now().UTC().Format(http.TimeFormat))
	b.WriteString("server: envoy\r\n")
	if closing {
		b.WriteString("connection: close\r\n")
	}
	b.WriteString("\r\n")
	if !head {
		b.WriteString(body)
	}
	return b.String()
}

// stop is Envoy's stopListeners for this listener: no more accepts, connections stay.
func (l *dataListener) stop() {
	e := l.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.stopped || e.shutting {
		return
	}
	l.stopped = true
	if l.ln != nil {
		l.ln.Close()
	} else {
		l.sock.close()
	}
	e.stats.counter("listener_manager.listener_stopped").add(1)
}

// closeAll is the process going away: every socket closes at once.
func (l *dataListener) closeAll() {
	e := l.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
	}
	l.sock.close()
	for c := range l.conns {
		c.nc.Close()
	}
}

type socketAddress struct {
	Address   string `json:"address"`
	PortValue uint16 `json:"port_value,omitempty"`
}

type listenerStatus struct {
	Name         string `json:"name"`
	LocalAddress struct {
		SocketAddress socketAddress `json:"socket_address"`
	} `json:"local_address"`
}

// handleListeners is /listeners: "name::address" lines, or admin.v3.Listeners as JSON.
func (e *Envoy) handleListeners(w http.ResponseWriter, r *http.Request) {
	if firstNonEmpty(query(r), "format") != "json" {
		var b strings.Builder
		for _, l := range e.listeners {
			fmt.Fprintf(&b, "%s::%s\n", l.cfg.Name, l.addr)
		}
		reply(w, http.StatusOK, "", b.String())
		return
	}
	var doc struct {
		ListenerStatuses []listenerStatus `json:"listener_statuses,omitempty"`
	}
	for _, l := range e.listeners {
		var s listenerStatus
		s.Name = l.cfg.Name
		s.LocalAddress.SocketAddress = socketAddress{Address: l.addr.Addr().String(), PortValue: l.addr.Port()}
		doc.ListenerStatuses = append(doc.ListenerStatuses, s)
	}
	body, err := protoJSON(doc)
	if err != nil {
		reply(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	reply(w, http.StatusOK, contentTypeJSON, body)
}
