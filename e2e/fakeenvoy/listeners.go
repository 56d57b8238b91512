package fakeenvoy

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// dataListener is one data-plane listener: a TCP proxy or an HTTP connection manager
// that forwards to its routes' upstreams (forward.go). Its connections are real, and
// they alone move the downstream_cx stats.
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

	goAway func()    // HTTP/2: starts the GOAWAY sequence, once; set under l.e.mu
	hinted sync.Once // counts downstream_cx_drain_close once

	// What the next release's proactive drain looks at (drainNow).
	requests atomic.Int32   // HTTP requests under way
	h2       atomic.Bool    // the connection speaks HTTP/2
	upgraded atomic.Bool    // an upgraded (WebSocket) stream holds it
	streams  sync.WaitGroup // upgraded streams, which outlive the HTTP server's hold on it
}

// drainNow is the connection manager draining a connection at once, the
// next release's proactive drain: an HTTP/2 connection gets its GOAWAY; an
// HTTP/1 one closes, cutting an upgraded stream, unless a plain request is
// under way, whose response says "connection: close" already.
func (l *dataListener) drainNow(c *dataConn) {
	l.e.mu.Lock()
	goAway := c.goAway
	l.e.mu.Unlock()
	switch {
	case c.h2.Load():
		if goAway != nil {
			goAway()
		}
	case c.upgraded.Load() || c.requests.Load() == 0:
		c.nc.Close()
	}
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
	if !l.drainStart.IsZero() {
		l.noticeDrain(c)
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
