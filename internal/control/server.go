// Package control owns the control socket, <control-dir>/control.sock: plain
// HTTP/1.1 over a unix socket in the volume the pod's containers share, through
// which app containers ask whether the proxy is ready, report that they are
// done, and ask for a drain. It holds both the server and the client.
//
// The socket is the only way to make the supervisor do anything. It lives in
// an emptyDir that only the pod can reach, it can be narrowed to a list of uids
// with SO_PEERCRED, and every request is bounded in size and time, so junk on
// it costs the supervisor nothing but a 400.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// SocketName is the socket's file name inside the control directory.
const SocketName = "control.sock"

// Bounds on requests. Long polls are capped at MaxWait; clients that want to
// wait longer ask again.
const (
	MaxWait     = 5 * time.Minute
	readTimeout = 5 * time.Second // the whole request: there is no body to wait for
	maxHeader   = 8 << 10
	// writeSlack is what an answer may take beyond its long poll.
	writeSlack = 10 * time.Second
)

// Backend is what the socket serves. The supervisor implements it.
type Backend interface {
	// WaitReady blocks until the proxy can carry the app's traffic or ctx
	// ends, and says why not when it cannot.
	WaitReady(ctx context.Context) (ready bool, why string)
	// Complete records that peer finished. An error means bad input.
	Complete(peer string, code int, reason string) error
	// Drain starts the drain if it has not started, and waits until it ends
	// or ctx does. It reports whether the drain condition was met, and why
	// not.
	Drain(ctx context.Context) (drained bool, why string)
	// Status is the supervisor's state, encoded as JSON.
	Status() any
}

// Server serves the control socket.
type Server struct {
	srv    *http.Server
	ln     net.Listener
	path   string
	cancel context.CancelFunc // ends the long polls at Close
}

// Listen creates the socket in dir, replacing a stale one left by an earlier
// run. allowed, when not empty, is the list of uids that may connect.
func Listen(dir string, b Backend, allowed []uint32, log *slog.Logger) (*Server, error) {
	path := filepath.Join(dir, SocketName)
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("control socket %s: path longer than %d bytes", path, len(unix.RawSockaddrUnix{}.Path)-1)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// App containers run as other uids than the proxy; the umask must not
	// decide who may connect.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	h := &handler{b: b, allowed: allowed, log: log}
	base, cancel := context.WithCancel(context.Background())
	return &Server{
		cancel: cancel,
		path:   path,
		// No cap on connections, unlike the health port: only the pod can
		// reach this socket, every request is bounded in time, and a cap
		// would hide the peer's credentials behind its wrapper.
		ln: ln,
		srv: &http.Server{
			Handler:           h.routes(),
			ReadHeaderTimeout: readTimeout,
			ReadTimeout:       readTimeout,
			IdleTimeout:       30 * time.Second,
			MaxHeaderBytes:    maxHeader,
			ConnContext:       withPeer,
			BaseContext:       func(net.Listener) context.Context { return base },
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
	}, nil
}

// removeStale removes a socket that nothing answers on. A socket that does
// answer belongs to a live supervisor, and a file that is not a socket is
// somebody else's; both are errors rather than things to delete.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("control socket %s: exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, 100*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("control socket %s: another supervisor is serving it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("control socket: remove stale socket: %w", err)
	}
	return nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve serves until Close.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("control socket: %w", err)
	}
	return nil
}

// Close stops serving and removes the socket file. Answers being written
// are delivered (the request that ended the job gets its 202) and long polls
// are ended with their answer, within closeGrace; then what is left is cut.
func (s *Server) Close() error {
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	// Shutdown closes only the listeners Serve ran on; a server that never
	// served must still release its socket.
	if cerr := s.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) && err == nil {
		err = cerr
	}
	return err
}

// closeGrace bounds how long Close waits for answers in flight.
const closeGrace = time.Second

type peerKey struct{}

// withPeer records the connecting process's uid, from the kernel rather than
// from anything the client says.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, cred.Uid)
}

type handler struct {
	b       Backend
	allowed []uint32
	log     *slog.Logger
}

func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ready", h.ready)
	mux.HandleFunc("POST /v1/complete", h.complete)
	mux.HandleFunc("POST /v1/drain", h.drain)
	mux.HandleFunc("GET /v1/status", h.status)
	return h.guard(mux)
}

// guard applies what every request owes: an allowed uid, a small body, known
// query parameters, and the right method (the mux's own 405 is plain text).
func (h *handler) guard(next http.Handler) http.Handler {
	methods := map[string]string{"/v1/ready": "GET", "/v1/complete": "POST", "/v1/drain": "POST", "/v1/status": "GET"}
	params := map[string][]string{
		"/v1/ready":    {"wait"},
		"/v1/complete": {"exit_code", "peer", "reason"},
		"/v1/drain":    {"wait"},
		"/v1/status":   nil,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(h.allowed) > 0 {
			uid, ok := r.Context().Value(peerKey{}).(uint32)
			if !ok || !slices.Contains(h.allowed, uid) {
				h.log.Warn("control socket: refused a client", "uid", uid, "path", r.URL.Path)
				fail(w, http.StatusForbidden, "uid %d is not in --allowed-uids", uid)
				return
			}
		}
		// Everything is in the query. A body would only be something for a
		// slow client to trickle, so none is accepted.
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
			fail(w, http.StatusBadRequest, "requests take no body; parameters go in the query")
			return
		}
		m, ok := methods[r.URL.Path]
		if !ok {
			fail(w, http.StatusNotFound, "no such endpoint: %s", r.URL.Path)
			return
		}
		if r.Method != m {
			w.Header().Set("Allow", m)
			fail(w, http.StatusMethodNotAllowed, "%s needs %s, not %s", r.URL.Path, m, r.Method)
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			fail(w, http.StatusBadRequest, "%v", err)
			return
		}
		for k := range q {
			if !slices.Contains(params[r.URL.Path], k) {
				fail(w, http.StatusBadRequest, "unknown parameter %q", k)
				return
			}
		}
		// No server-wide write timeout fits long polls, so each answer
		// gets its own: its wait (capped) plus slack. A drain without a
		// wait is bounded by the supervisor's --drain-timeout.
		wait := MaxWait
		if d, err := waitParam(r); err == nil && d > 0 {
			wait = d
		}
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + writeSlack))
		next.ServeHTTP(w, r)
	})
}

func (h *handler) ready(w http.ResponseWriter, r *http.Request) {
	wait, err := waitParam(r)
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	if ok, why := h.b.WaitReady(ctx); !ok {
		reply(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": why})
		return
	}
	reply(w, http.StatusOK, map[string]any{"ready": true})
}

func (h *handler) complete(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	raw := q.Get("exit_code")
	if raw == "" {
		fail(w, http.StatusBadRequest, "exit_code is required")
		return
	}
	code, err := strconv.Atoi(raw)
	if err != nil || code < 0 || code > 255 {
		fail(w, http.StatusBadRequest, "exit_code %q: want an integer from 0 to 255", raw)
		return
	}
	peer := q.Get("peer")
	if peer == "" {
		peer = DefaultPeer
	}
	if err := h.b.Complete(peer, code, q.Get("reason")); err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	reply(w, http.StatusAccepted, map[string]any{"recorded": true, "peer": peer, "exit_code": code})
}

func (h *handler) drain(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if r.URL.Query().Has("wait") {
		wait, err := waitParam(r)
		if err != nil {
			fail(w, http.StatusBadRequest, "%v", err)
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	if ok, why := h.b.Drain(ctx); !ok {
		reply(w, http.StatusGatewayTimeout, map[string]any{"drained": false, "reason": why})
		return
	}
	reply(w, http.StatusOK, map[string]any{"drained": true})
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	reply(w, http.StatusOK, h.b.Status())
}

// DefaultPeer is the peer name when none is given.
const DefaultPeer = "app"

func waitParam(r *http.Request) (time.Duration, error) {
	raw := r.URL.Query().Get("wait")
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("wait %q: want a duration such as 30s", raw)
	}
	return min(d, MaxWait), nil
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, format string, args ...any) {
	reply(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}
