package fakeenvoy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is an app behind the fake: it answers with its name, the
// protocol it was asked in and a digest of the body it received.
func upstream(t *testing.T, name string, h2 bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		fmt.Fprintf(w, "%s %s %d %x", name, r.Proto, n, h.Sum(nil)[:4])
	}))
	if h2 {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// sidecarYAML is a sidecar's bootstrap: an inbound listener proxying to the
// app, an outbound one proxying to another service (over h2c when h2), and
// a tcp_proxy to the app.
func sidecarYAML(app, svc string, h2 bool) string {
	proto := ""
	if h2 {
		proto = `
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}`
	}
	hcm := func(prefix, cluster string) string {
		return fmt.Sprintf(`
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: %s   # the http.<prefix> stats
          route_config:
            validate_clusters: false   # /nowhere's cluster does not exist
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {path: /direct}
                direct_response: {status: 202, body: {inline_string: "direct\n"}}
              - match: {prefix: /nowhere}
                route: {cluster: missing}
              - match: {prefix: /}
                route: {cluster: %s}`, prefix, cluster)
	}
	host, port, _ := net.SplitHostPort(app)
	shost, sport, _ := net.SplitHostPort(svc)
	return `
static_resources:
  listeners:
  - name: virtualInbound
    traffic_direction: INBOUND
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:` + hcm("inbound", "app") + `
  - name: virtualOutbound
    traffic_direction: OUTBOUND
    address:
      socket_address:
        address: 127.0.0.1
        port_value: 0
    filter_chains:` + hcm("outbound", "svc") + `
  - name: tcp
    traffic_direction: INBOUND
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: tcp
          cluster: app
  clusters:
  - name: app
    load_assignment:
      cluster_name: app
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: ` + host + `, port_value: ` + port + `}}}
  - name: svc` + proto + `
    load_assignment:
      cluster_name: svc
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: "` + shost + `", port_value: "` + sport + `"}
`
}

// startSidecar runs a fake with sidecarYAML's listeners, in order inbound,
// outbound, tcp.
func startSidecar(t *testing.T, strategy string, h2 bool) (e *Envoy, app, svc *httptest.Server) {
	t.Helper()
	app, svc = upstream(t, "app", false), upstream(t, "svc", h2)
	b, err := ParseBootstrap(nil, false, sidecarYAML(app.Listener.Addr().String(), svc.Listener.Addr().String(), h2))
	if err != nil {
		t.Fatal(err)
	}
	return startLive(t, Options{Listeners: b.Listeners, DrainStrategy: strategy, DrainTime: time.Minute}), app, svc
}

// client is a keep-alive client that tells whether each request reused a
// connection.
type client struct {
	t      *testing.T
	c      *http.Client
	reused atomic.Bool
}

func newClient(t *testing.T, h2 bool) *client {
	t.Helper()
	tr := &http.Transport{}
	if h2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, c: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// do sends a request and returns its status, body and whether the answer
// asked to close the connection.
func (c *client) do(method, url string, body io.Reader) (int, string, bool) {
	c.t.Helper()
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { c.reused.Store(i.Reused) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, url, body)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: body: %v", method, url, err)
	}
	return resp.StatusCode, string(b), resp.Close
}

func TestForwardsHTTP1AndRoutes(t *testing.T) {
	t.Parallel()
	e, _, _ := startSidecar(t, "immediate", false)
	in, out := "http://"+e.ListenerAddrs()[0].String(), "http://"+e.ListenerAddrs()[1].String()
	c := newClient(t, false)
	if code, body, _ := c.do("GET", in+"/x", nil); code != 200 || !strings.HasPrefix(body, "app HTTP/1.1 0") {
		t.Fatalf("inbound: %d %q, want the app's answer", code, body)
	}
	if code, body, _ := c.do("GET", out+"/x", nil); code != 200 || !strings.HasPrefix(body, "svc HTTP/1.1 0") {
		t.Fatalf("outbound: %d %q, want the service's answer", code, body)
	}
	if code, body, _ := c.do("GET", in+"/direct", nil); code != 202 || body != "direct\n" {
		t.Fatalf("direct_response: %d %q", code, body)
	}
	if code, _, _ := c.do("GET", in+"/nowhere", nil); code != 503 {
		t.Fatalf("a route to a cluster without endpoints: %d, want 503", code)
	}
	c.do("GET", in+"/x", nil)
	if !c.reused.Load() {
		t.Error("the downstream keep-alive connection was not reused")
	}
	// The upload arrives whole.
	payload := bytes.Repeat([]byte("0123456789"), 100_000)
	sum := sha256.Sum256(payload)
	if code, body, _ := c.do("POST", out+"/up", bytes.NewReader(payload)); code != 200 || body != fmt.Sprintf("svc HTTP/1.1 %d %x", len(payload), sum[:4]) {
		t.Fatalf("upload: %d %q", code, body)
	}
}

func TestForwardsTCP(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	b, err := ParseBootstrap(nil, false, sidecarYAML(ln.Addr().String(), ln.Addr().String(), false))
	if err != nil {
		t.Fatal(err)
	}
	e := startLive(t, Options{Listeners: b.Listeners})
	c := dialHTTP(t, e.ListenerAddrs()[2].String())
	if !echo(t, c) {
		t.Fatal("nothing came back through the tcp_proxy")
	}
}

// The HTTP/2 path: h2c downstream and upstream, and a drain's GOAWAY on the
// drained listener's connections only.
func TestForwardsH2CAndDrainSendsGoaway(t *testing.T) {
	t.Parallel()
	e, _, _ := startSidecar(t, "immediate", true)
	in, out := "http://"+e.ListenerAddrs()[0].String(), "http://"+e.ListenerAddrs()[1].String()
	inC, outC := newClient(t, true), newClient(t, true)
	if code, body, _ := inC.do("GET", in+"/", nil); code != 200 || !strings.HasPrefix(body, "app HTTP/1.1") {
		t.Fatalf("inbound over h2c: %d %q", code, body)
	}
	if code, body, _ := outC.do("GET", out+"/", nil); code != 200 || !strings.HasPrefix(body, "svc HTTP/2.0") {
		t.Fatalf("outbound over h2c to an h2c cluster: %d %q", code, body)
	}
	if a := call(t, e, "POST", "/drain_listeners?graceful&inboundonly"); a.code != 200 {
		t.Fatalf("drain: %d %q", a.code, a.body)
	}
	// The inbound connection's next response comes, then its GOAWAY: the
	// request after that needs a new connection.
	inC.do("GET", in+"/", nil)
	if !inC.reused.Load() {
		t.Fatal("the response after the drain did not come on the open connection")
	}
	eventually(t, "a GOAWAY making the client open a new inbound connection", func() bool {
		inC.do("GET", in+"/", nil)
		return !inC.reused.Load()
	})
	for range 3 {
		outC.do("GET", out+"/", nil)
		if !outC.reused.Load() {
			t.Fatal("the outbound listener's connection went away in an inbound-only drain")
		}
	}
	if st := stats(t, e, "?filter=drain_close"); st["http.inbound.downstream_cx_drain_close"] == 0 || st["http.outbound.downstream_cx_drain_close"] != 0 {
		t.Errorf("drain_close stats %v", st)
	}
}

// During an inbound drain: an upload under way on an inbound keep-alive
// finishes whole and its response says close; an idle inbound keep-alive
// stays open until its next response; an outbound keep-alive gets no hint;
// a new inbound connection is served.
func TestForwardingDuringDrain(t *testing.T) {
	t.Parallel()
	e, _, _ := startSidecar(t, "immediate", false)
	inAddr, outAddr := e.ListenerAddrs()[0].String(), e.ListenerAddrs()[1].String()
	idle, outbound := dialHTTP(t, inAddr), dialHTTP(t, outAddr)
	if idle.get() || outbound.get() {
		t.Fatal("connection: close before any drain")
	}
	pr, pw := io.Pipe()
	type result struct {
		code  int
		body  string
		close bool
	}
	done := make(chan result, 1)
	go func() {
		c := newClient(t, false)
		req, _ := http.NewRequest("POST", "http://"+inAddr+"/upload", pr)
		resp, err := c.c.Do(req)
		if err != nil {
			done <- result{}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b), resp.Close}
	}()
	pw.Write([]byte("first half,"))
	eventually(t, "the upload in flight", func() bool {
		return stats(t, e, "?filter=^http.inbound.downstream_rq_active$")["http.inbound.downstream_rq_active"] == 1
	})
	if a := call(t, e, "POST", "/drain_listeners?graceful&inboundonly"); a.code != 200 {
		t.Fatalf("drain: %d %q", a.code, a.body)
	}
	pw.Write([]byte("second half"))
	pw.Close()
	r := <-done
	if r.code != 200 || !strings.HasPrefix(r.body, "app HTTP/1.1 22 ") || !r.close {
		t.Errorf("the upload under the drain: %+v; want 200, 22 bytes arrived, connection: close", r)
	}
	if idle.closedByPeer(200 * time.Millisecond) {
		t.Error("the drain closed an idle inbound keep-alive")
	}
	if !idle.get() {
		t.Error("the idle inbound keep-alive's next response lacks connection: close")
	}
	if outbound.get() {
		t.Error("an outbound keep-alive got connection: close in an inbound-only drain")
	}
	if !dialHTTP(t, inAddr).get() {
		t.Error("a new inbound connection during the drain was not served with connection: close")
	}
}
