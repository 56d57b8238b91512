package health

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/proxy-supervisor/proxy-supervisor/internal/metrics"
)

// Bounds on the health server. Probes are tiny and the kubelet's timeout is
// seconds, so anything slower than this is not a probe; it is closed rather
// than allowed to hold a goroutine and a file descriptor. The kubelet opens a
// connection per probe, so an idle connection is kept only briefly: long
// enough for a scraper's next request, too short for a few clients to park
// on every slot and starve the probes.
const (
	headerTimeout = 2 * time.Second
	idleTimeout   = time.Second
	maxHeader     = 8 << 10
	maxConns      = 128
)

// ReadyFunc says whether the pod may be sent traffic, and why not.
type ReadyFunc func() (ready bool, why string)

// Server is the TCP health server. It has no endpoint that changes anything:
// under Istio, redirected traffic reaches local ports from 127.0.0.6, so a
// loopback check would protect nothing, and stopping goes through the control
// socket alone.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr (such as :15022) and returns a server ready to Serve.
func Listen(addr string, ready ReadyFunc, reg *metrics.Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health server: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/ready", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		ok, why := ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /healthz/live", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "live")
	})
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
		ln: netutil.LimitListener(ln, maxConns),
	}, nil
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
