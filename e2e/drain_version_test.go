package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sidecarBootstrap is a sidecar's Envoy config for the fake: an INBOUND
// listener on 9000 proxying to the app on 8080, and an OUTBOUND one on 9001
// proxying to a service the app calls, on 8081.
const sidecarBootstrap = `
static_resources:
  listeners:
  - name: virtualInbound
    traffic_direction: INBOUND
    address: {socket_address: {address: 127.0.0.1, port_value: 9000}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: inbound
          route_config: {virtual_hosts: [{name: app, domains: ["*"], routes: [{match: {prefix: /}, route: {cluster: app}}]}]}
  - name: virtualOutbound
    traffic_direction: OUTBOUND
    address: {socket_address: {address: 127.0.0.1, port_value: 9001}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: outbound
          route_config: {virtual_hosts: [{name: svc, domains: ["*"], routes: [{match: {prefix: /}, route: {cluster: svc}}]}]}
  clusters:
  - name: app
    load_assignment: {cluster_name: app, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8080}}}}]}]}
  - name: svc
    load_assignment: {cluster_name: svc, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8081}}}}]}]}
`

// serveHTTP runs an HTTP server named name on addr inside the pod.
func (p *pod) serveHTTP(addr, name string) net.Listener {
	p.t.Helper()
	return p.serve(addr, name, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, name)
	}))
}

// serve runs h, the app named name, on addr inside the pod.
func (p *pod) serve(addr, name string, h http.Handler) net.Listener {
	p.t.Helper()
	var ln net.Listener
	if err := p.netns.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		p.t.Fatalf("%s listen %s: %v", name, addr, err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	p.t.Cleanup(func() { srv.Close() })
	return ln
}

// keepAlive is an HTTP/1.1 client connection made inside the pod.
type keepAlive struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (p *pod) keepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	c := p.dial(t, addr)
	return &keepAlive{t: t, c: c, br: bufio.NewReader(c)}
}

// dial connects to addr inside the pod, closed when t ends.
func (p *pod) dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := p.netns.Dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends a request and returns the body and whether the answer said
// connection: close.
func (k *keepAlive) get() (string, bool) {
	k.t.Helper()
	k.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(k.c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		k.t.Fatalf("request: %v", err)
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		k.t.Fatalf("response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		k.t.Fatalf("status %d %q", resp.StatusCode, b)
	}
	return string(b), resp.Close
}

// A preStop drain on each Envoy release, the supervisor as PID 1 and the
// fake forwarding real traffic: the app's outbound keep-alive is never
// told to close, the inbound one is where the release allows it, a new
// inbound connection is served after Envoy's --drain-time-s (1 s here) while
// the app still listens, and the proxy stops only once the app has ended.
func TestDrainPerEnvoyVersion(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		version       string
		call          string
		inboundHinted bool
	}{
		{"1.31", "none", false}, // envoy#35020: any hint would reach the outbound one too
		{"1.36", "/drain_listeners?graceful&inboundonly&skip_exit", true},
		{"1.40", "/drain_listeners?graceful&inboundonly&skip_exit", true},
	} {
		t.Run(tt.version, func(t *testing.T) {
			t.Parallel()
			p := newPod(t)
			// The hints at the drain's start (no --drain-delay), while
			// the app still listens: what each release does with them.
			sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s", "--drain-delay", "0s", "--app-ports", "8080"},
				"--fake-version", tt.version, "--drain-time-s", "1", "--drain-strategy", "immediate",
				"--config-yaml", sidecarBootstrap)
			app := p.serveHTTP("127.0.0.1:8080", "app")
			p.serveHTTP("127.0.0.1:8081", "svc")
			p.waitHTTP(readyURL, 200, soon)
			sup.WaitLog(fmt.Sprintf("envoy=%s.0 call=%s", tt.version, tt.call), soon) // the drain call chosen
			in, out := p.keepAlive(t, "127.0.0.1:9000"), p.keepAlive(t, "127.0.0.1:9001")
			if body, closing := in.get(); body != "app" || closing {
				t.Fatalf("inbound before the drain: %q, close %v", body, closing)
			}
			if body, closing := out.get(); body != "svc" || closing {
				t.Fatalf("outbound before the drain: %q, close %v", body, closing)
			}

			hook := p.prestop()
			sup.WaitLog(`msg="drain started"`, soon)
			p.stillBlocked(sup, hook, 1500*time.Millisecond) // past --drain-time-s
			if _, closing := out.get(); closing {
				t.Error("the app's outbound keep-alive was told to close")
			}
			if _, closing := in.get(); closing != tt.inboundHinted {
				t.Errorf("inbound keep-alive told to close = %v, want %v", closing, tt.inboundHinted)
			}
			if body, _ := p.keepAlive(t, "127.0.0.1:9000").get(); body != "app" {
				t.Errorf("a new inbound connection after --drain-time-s: %q", body)
			}
			if sup.Wait(100 * time.Millisecond) {
				t.Fatal("the supervisor exited while the app listens")
			}

			app.Close()
			if code := hook.Exit(soon); code != 0 || !strings.Contains(hook.Out.String(), "drained") {
				t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
			}
			deleted(t, sup)
		})
	}
}
