package fakeenvoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// connectTimeout is a cluster's connect_timeout, 5 s by default in Envoy.
const connectTimeout = 5 * time.Second

// upstreams are the connection pools of every listener's routes: HTTP/1.1
// with keep-alive, and HTTP/2 over cleartext (prior knowledge) for clusters
// with http2_protocol_options. Like Envoy's, they are the proxy's own and
// outlive the downstream connections; a drain does not touch them.
type upstreams struct {
	h1, h2 *http.Transport
}

func newUpstreams() upstreams {
	dial := (&net.Dialer{Timeout: connectTimeout}).DialContext
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	return upstreams{
		h1: &http.Transport{DialContext: dial, DisableCompression: true, MaxIdleConnsPerHost: 64},
		h2: &http.Transport{DialContext: dial, DisableCompression: true, Protocols: &h2},
	}
}

func (u upstreams) close() {
	u.h1.CloseIdleConnections()
	u.h2.CloseIdleConnections()
}

// downstreamProtocols are HTTP/1.1 and HTTP/2 with prior knowledge on one
// port, as Envoy's codec_type AUTO infers a plaintext connection's protocol
// from its first bytes.
func downstreamProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// serveHTTP runs an HTTP connection manager on one connection. Each
// connection has a server of its own, so that a drain can end one HTTP/2
// connection (GOAWAY) and leave the others.
func (l *dataListener) serveHTTP(c *dataConn) {
	closed := make(chan struct{})
	var once sync.Once
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serveRequest(c, w, r) }),
		Protocols: downstreamProtocols(),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				once.Do(func() { close(closed) })
			}
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	// Go's graceful shutdown of an HTTP/2 connection is Envoy's drain
	// sequence for it: a GOAWAY, the streams under way finish, then the
	// connection closes.
	goAway := sync.OnceFunc(func() {
		go srv.Shutdown(context.Background()) // ends when the connection does
	})
	l.e.mu.Lock()
	c.goAway = goAway
	l.e.mu.Unlock()
	ln := &oneConnListener{conn: c.nc, addr: c.nc.LocalAddr(), closed: make(chan struct{})}
	go srv.Serve(ln)
	<-closed
	c.streams.Wait() // an upgraded stream goes on after the hijack
	ln.Close()
}

// serveRequest is one request (an HTTP/1 request or an HTTP/2 stream). It is
// active, in downstream_rq_active, from its headers to the end of its
// response, its body's upload included.
func (l *dataListener) serveRequest(c *dataConn, w http.ResponseWriter, r *http.Request) {
	scope := l.httpScope()
	active := l.e.stats.gauge(scope + ".downstream_rq_active")
	// Envoy counts a request when its headers are decoded, so a client that
	// has its response always sees itself in downstream_rq_total.
	l.e.stats.counter(scope + ".downstream_rq_total").add(1)
	active.add(1)
	defer active.add(-1)
	c.requests.Add(1)
	defer c.requests.Add(-1)
	if r.ProtoMajor >= 2 {
		c.h2.Store(true)
	}
	l.route(c, w, r)
	l.answered(w)
}

// route answers a request by the listener's routes.
func (l *dataListener) route(c *dataConn, w http.ResponseWriter, r *http.Request) {
	if l.cfg.Routes == nil {
		io.Copy(io.Discard, r.Body)
		l.respond(c, w, r, http.StatusOK, fmt.Sprintf("fake-envoy listener %s\n", l.cfg.Name))
		return
	}
	var rt *Route
	for i := range l.cfg.Routes {
		if l.cfg.Routes[i].matches(r.URL.Path) {
			rt = &l.cfg.Routes[i]
			break
		}
	}
	switch {
	case rt == nil:
		io.Copy(io.Discard, r.Body)
		l.respond(c, w, r, http.StatusNotFound, "")
	case rt.Cluster == "":
		io.Copy(io.Discard, r.Body)
		l.respond(c, w, r, rt.Status, rt.Body)
	case rt.Upstream == "":
		io.Copy(io.Discard, r.Body)
		l.respond(c, w, r, http.StatusServiceUnavailable, "no healthy upstream")
	case r.ProtoMajor == 1 && r.Header.Get("Upgrade") != "":
		l.forwardUpgrade(c, w, r, rt)
	default:
		l.forward(c, w, r, rt)
	}
}

// answered counts a response the handler has finished (a forward cut
// mid-body panics past it), once it is out: OnAnswered may end the process.
func (l *dataListener) answered(w http.ResponseWriter) {
	http.NewResponseController(w).Flush() //nolint:errcheck // a gone client's answer counts the same
	if n := l.e.answered.Add(1); l.e.opts.OnAnswered != nil {
		l.e.opts.OnAnswered(n)
	}
}

// respond answers a request from the listener itself.
func (l *dataListener) respond(c *dataConn, w http.ResponseWriter, r *http.Request, code int, body string) {
	h := w.Header()
	h.Set("Server", "envoy")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if body != "" {
		h.Set("Content-Type", "text/plain")
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	l.hintDrain(c, w, r)
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		io.WriteString(w, body)
	}
}

// forward proxies a request to its route's upstream, streaming both bodies:
// an upload goes on while it arrives, and so does a long response.
func (l *dataListener) forward(c *dataConn, w http.ResponseWriter, r *http.Request, rt *Route) {
	body := r.Body
	if r.ContentLength == 0 {
		body = http.NoBody
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+rt.Upstream+r.URL.RequestURI(), body)
	if err != nil {
		l.respond(c, w, r, http.StatusBadRequest, "")
		return
	}
	copyHeader(out.Header, r.Header)
	out.Header.Set("X-Forwarded-Proto", "http")
	out.Host = r.Host
	out.ContentLength = r.ContentLength
	t := l.e.up.h1
	if rt.H2 {
		t = l.e.up.h2
	}
	resp, ok := l.roundTrip(c, w, r, t, out)
	if !ok {
		return
	}
	defer resp.Body.Close()
	l.relay(c, w, r, resp)
}

// roundTrip sends a request upstream; when that fails, the client gets
// Envoy's 503 unless it went away.
func (l *dataListener) roundTrip(c *dataConn, w http.ResponseWriter, r *http.Request, t http.RoundTripper, out *http.Request) (*http.Response, bool) {
	resp, err := t.RoundTrip(out)
	if err != nil {
		if r.Context().Err() == nil {
			l.respond(c, w, r, http.StatusServiceUnavailable,
				"upstream connect error or disconnect/reset before headers. reset reason: connection failure")
		}
		return nil, false
	}
	return resp, true
}

// relay streams an upstream's response to the client.
func (l *dataListener) relay(c *dataConn, w http.ResponseWriter, r *http.Request, resp *http.Response) {
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("Server", "envoy")
	l.hintDrain(c, w, r)
	w.WriteHeader(resp.StatusCode)
	flush := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			flush.Flush()
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				// Reset mid-body: the downstream connection cannot be
				// kept, so it goes too.
				panic(http.ErrAbortHandler)
			}
			return
		}
	}
}

// hintDrain is the HTTP connection manager's drain decision, taken as a
// response's headers go out: on a draining listener, an HTTP/1 response
// carries "connection: close" and the connection closes after it; an HTTP/2
// connection gets a GOAWAY, its streams under way finish, and it closes.
// Up to 1.40 nothing else tells a connection: an idle keep-alive stays open,
// counted in downstream_cx_active, until its client sends again or closes
// it, and an upgraded stream, which no response follows, until a peer ends
// it. The next release drains those too (EnvoyVersion.proactiveDrain).
func (l *dataListener) hintDrain(c *dataConn, w http.ResponseWriter, r *http.Request) {
	if !l.drainCloseDue(c) {
		return
	}
	if r.ProtoMajor >= 2 {
		c.goAway()
	} else {
		w.Header().Set("Connection", "close")
	}
	c.hinted.Do(func() { l.e.stats.counter(l.httpScope() + ".downstream_cx_drain_close").add(1) })
}

// hopHeaders are the hop-by-hop headers a proxy does not forward.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer", "Upgrade"}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}

// forwardUpgrade proxies an HTTP/1.1 upgrade, such as a WebSocket: the
// upstream's 101 goes back, and from then on the stream is bytes both ways
// until either side ends it.
func (l *dataListener) forwardUpgrade(c *dataConn, w http.ResponseWriter, r *http.Request, rt *Route) {
	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, "http://"+rt.Upstream+r.URL.RequestURI(), http.NoBody)
	if err != nil {
		l.respond(c, w, r, http.StatusBadRequest, "")
		return
	}
	copyHeader(out.Header, r.Header)
	out.Header.Set("Connection", "Upgrade")
	out.Header.Set("Upgrade", r.Header.Get("Upgrade"))
	out.Host = r.Host
	resp, ok := l.roundTrip(c, w, r, l.e.up.h1, out)
	if !ok {
		return
	}
	defer resp.Body.Close()
	up, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		l.relay(c, w, r, resp)
		return
	}
	c.streams.Add(1) // before the hijack lets serveHTTP return
	defer c.streams.Done()
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	c.upgraded.Store(true)
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.Set("Server", "envoy")
	resp.Header.Write(brw)
	brw.WriteString("\r\n")
	if brw.Flush() != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Copy(up, brw) // what the client sent, buffered or not
		up.Close()
		nc.Close()
		close(done)
	}()
	io.Copy(nc, up)
	up.Close()
	nc.Close()
	<-done
}

// serveTCP is tcp_proxy: the connection is joined to one to the upstream,
// or echoed when the listener has none. It lasts until one of its peers
// closes it, or, where tcp_proxy acts on drains (checksDrain), until bytes
// pass once a drain has told it to close.
func (l *dataListener) serveTCP(c *dataConn) {
	switch l.cfg.Upstream {
	case "":
		l.pipe(c, c.nc, c.nc)
		return
	case unreachable:
		return
	}
	up, err := net.DialTimeout("tcp", l.cfg.Upstream, connectTimeout)
	if err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		l.pipe(c, up, c.nc)
		up.Close()
		c.nc.Close()
		close(done)
	}()
	l.pipe(c, c.nc, up)
	up.Close()
	c.nc.Close()
	<-done
}

// pipe copies one direction of a tcp_proxy connection. Where tcp_proxy acts
// on drains, it asks after each chunk written, in either direction, and
// closes the downstream once the drain says so, the chunk flushed first
// (envoy#44567: FlushWrite).
func (l *dataListener) pipe(c *dataConn, dst io.Writer, src io.Reader) {
	if !l.checksDrain() {
		io.Copy(dst, src)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if l.drainCloseDue(c) {
				l.e.stats.counter("tcp." + l.cfg.StatPrefix + ".downstream_cx_drain_close").add(1)
				c.nc.Close()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// oneConnListener hands a server one connection, then waits until closed.
type oneConnListener struct {
	mu     sync.Mutex
	conn   net.Conn
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func (o *oneConnListener) Accept() (net.Conn, error) {
	o.mu.Lock()
	c := o.conn
	o.conn = nil
	o.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-o.closed
	return nil, net.ErrClosed
}

func (o *oneConnListener) Close() error {
	o.once.Do(func() { close(o.closed) })
	return nil
}

func (o *oneConnListener) Addr() net.Addr { return o.addr }
