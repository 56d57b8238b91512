// Package control owns the control socket, <control-dir>/sock/control.sock: plain
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
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The socket is <control-dir>/sock/control.sock. The control dir is an
// emptyDir, writable by every uid and, unless the supervisor runs as root,
// not sticky: there any uid may unlink or rename any entry, and a socket
// that lived there could be swapped for another uid's server, or for a
// symlink that its chmod would follow. So the socket lives in a directory of
// its own that only the supervisor's uid can write in, and a client checks
// the uid of the server it reached (see NewClient), because that directory
// itself can still be renamed away where the control dir is not sticky.
const (
	SocketDir  = "sock"
	SocketName = "control.sock"
)

// SocketPath is the socket's path in the control directory dir.
func SocketPath(dir string) string { return filepath.Join(dir, SocketDir, SocketName) }

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
	// Complete records that peer finished; ctx carries the caller's uid
	// (CallerUID). An error means bad input (400), or a refusal of the
	// caller (403) when it has a method Forbidden that returns true.
	Complete(ctx context.Context, peer string, code int, reason string) error
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
	dir    int    // the socket's directory, open until Close
	ino    uint64 // the socket file we bound, the only one Close removes
	once   sync.Once
	cancel context.CancelFunc // ends the long polls at Close
	log    *slog.Logger

	markMu   sync.Mutex
	markable bool // no --allowed-uids: every uid may hear readiness
	marked   bool // the ready mark is on the socket file
	closed   bool // the socket file is gone, or going
}

// Listen creates the socket in the control directory dir, replacing a stale
// one left by an earlier run. allowed, when not empty, is the list of uids
// that may connect.
func Listen(dir string, b Backend, allowed []uint32, log *slog.Logger) (*Server, error) {
	path := SocketPath(dir)
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("control socket %s: path longer than %d bytes", path, len(unix.RawSockaddrUnix{}.Path)-1)
	}
	cfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: open control dir %s: %w", dir, err)
	}
	defer unix.Close(cfd)
	stick(cfd, dir, log)
	sd, err := openSocketDir(cfd, filepath.Join(dir, SocketDir))
	if err != nil {
		return nil, err
	}
	ln, ino, err := bindIn(sd, path)
	if err != nil {
		unix.Close(sd)
		return nil, err
	}
	h := &handler{b: b, allowed: allowed, log: log}
	base, cancel := context.WithCancel(context.Background())
	return &Server{
		cancel:   cancel,
		log:      log,
		markable: len(allowed) == 0,
		path:     path,
		dir:      sd,
		ino:      ino,
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

// stick sets the sticky bit on a control dir that other uids can write in,
// so that none of them can rename the socket's directory (or peers/) away
// and put its own in its place. Only the dir's owner or root can: under
// Istio the supervisor is uid 1337 without capabilities in a root-owned
// emptyDir, and then the clients' check of the server's uid is what holds.
func stick(cfd int, dir string, log *slog.Logger) {
	var st unix.Stat_t
	if err := unix.Fstat(cfd, &st); err != nil {
		log.Warn("control dir: cannot stat it", "dir", dir, "err", err)
		return
	}
	if st.Mode&unix.S_ISVTX != 0 || st.Mode&0o022 == 0 {
		return
	}
	if err := unix.Fchmod(cfd, st.Mode&0o7777|unix.S_ISVTX); err != nil {
		log.Info("control dir: other uids may rename entries in it and it cannot be made sticky; clients refuse a socket served by a uid they do not trust",
			"dir", dir, "owner", st.Uid, "uid", os.Geteuid(), "err", err)
	}
}

// openSocketDir makes the socket's directory, writable by our uid alone, and
// returns it open. Everything after this goes through that descriptor, so
// that a rename of the directory, or of anything above it, cannot redirect
// what we bind, chmod or remove. A directory of that name that another uid
// owns, or that is not a directory, is refused, never followed or used.
func openSocketDir(cfd int, path string) (int, error) {
	if err := unix.Mkdirat(cfd, SocketDir, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("control socket: create %s: %w", path, err)
	}
	sd, err := unix.Openat(cfd, SocketDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, fmt.Errorf("control socket: %s exists and is not a directory", path)
	}
	if err != nil {
		return -1, fmt.Errorf("control socket: open %s: %w", path, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(sd, &st)
	if uid := uint32(os.Geteuid()); err == nil && st.Uid != uid {
		err = fmt.Errorf("owned by uid %d, not by us (uid %d), so that uid could serve the socket in our place; remove it", st.Uid, uid)
	}
	if err == nil {
		err = unix.Fchmod(sd, 0o755) // the umask must not decide who may reach the socket
	}
	if err != nil {
		unix.Close(sd)
		return -1, fmt.Errorf("control socket: %s: %w", path, err)
	}
	return sd, nil
}

// bindIn binds the socket in the directory sd and opens it to every uid.
// Both steps go through sd by /proc/self/fd: bind(2) takes only a path, and
// the socket's mode must be set on the file, by chmod(2) after the bind
// (fchmod on a socket descriptor changes the socket, not the file). The
// chmod goes through an O_PATH descriptor of the file, opened without
// following a symlink and checked to be a socket, so it cannot be
// redirected to anything else.
func bindIn(sd int, path string) (*net.UnixListener, uint64, error) {
	via := fmt.Sprintf("/proc/self/fd/%d/%s", sd, SocketName)
	if err := removeStale(sd, via, path); err != nil {
		return nil, 0, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: via, Net: "unix"})
	if err != nil {
		return nil, 0, fmt.Errorf("control socket %s: %w", path, err)
	}
	// Close removes the file itself, through sd: the path ln knows names
	// whatever the descriptor number means by then.
	ln.SetUnlinkOnClose(false)
	ino, err := openToAll(sd)
	if err != nil {
		ln.Close()
		return nil, 0, fmt.Errorf("control socket %s: %w", path, err)
	}
	return ln, ino, nil
}

// openToAll makes the socket file in sd connectable by every uid (app
// containers run as other uids than the proxy) and returns its inode.
func openToAll(sd int) (uint64, error) {
	fd, err := unix.Openat(sd, SocketName, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return 0, errors.New("replaced by something that is not a socket right after the bind")
	}
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), 0o666); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// removeStale removes a socket that nothing answers on. A socket that does
// answer belongs to a live supervisor, and a file that is not a socket was
// not put there by us; both are errors rather than things to delete.
func removeStale(sd int, via, path string) error {
	var st unix.Stat_t
	err := unix.Fstatat(sd, SocketName, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("control socket %s: exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", via, 100*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("control socket %s: another supervisor is serving it", path)
	}
	if err := unix.Unlinkat(sd, SocketName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("control socket %s: remove stale socket: %w", path, err)
	}
	return nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// ReadyMark is the mode bit of the socket file that says the proxy is ready:
// its sticky bit, which means nothing to the kernel on a socket. While it is
// set, /v1/ready would answer 200 at once, and a client that can connect to
// the socket knows that without a request (Client.Ready).
const ReadyMark = unix.S_ISVTX

// MarkReady sets the ready mark while ready, and clears it otherwise. The
// supervisor calls it on every change of readiness, before it answers the
// long polls waiting for it. A mark that is missing costs a client only its
// request, so a failure to set it is logged and left. A server with a list
// of allowed uids never sets it: a client outside the list must hear its
// refusal from a request, not its readiness from the mark.
func (s *Server) MarkReady(ready bool) {
	s.markMu.Lock()
	defer s.markMu.Unlock()
	if !s.markable || s.closed || s.marked == ready {
		return
	}
	mode := uint32(0o666)
	if ready {
		mode |= ReadyMark
	}
	// Through an O_PATH descriptor of the socket we bound, checked to be
	// it, as at the bind: a chmod by path could follow whatever is there.
	fd, err := unix.Openat(s.dir, SocketName, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		var st unix.Stat_t
		if err = unix.Fstat(fd, &st); err == nil && st.Ino != s.ino {
			err = errors.New("not the socket this supervisor bound")
		}
		if err == nil {
			err = unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode)
		}
		unix.Close(fd)
	}
	if err != nil {
		s.log.Warn("control socket: cannot set its ready mark; clients will ask instead", "ready", ready, "err", err)
		return
	}
	s.marked = ready
}

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
	s.unlink()
	return err
}

// unlink removes the socket file if it is still the one we bound, and
// closes its directory. It runs once, however often Close is called.
func (s *Server) unlink() {
	s.markMu.Lock()
	s.closed = true // no chmod of a file being removed, or of its successor
	s.markMu.Unlock()
	s.once.Do(func() {
		var st unix.Stat_t
		if unix.Fstatat(s.dir, SocketName, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == s.ino {
			unix.Unlinkat(s.dir, SocketName, 0)
		}
		unix.Close(s.dir)
	})
}

// closeGrace bounds how long Close waits for answers in flight.
const closeGrace = time.Second

type peerKey struct{}

// CallerUID is the uid of the process that made the request, from the
// kernel (SO_PEERCRED) rather than from anything the client says. ok is
// false for a context that did not come from the socket.
func CallerUID(ctx context.Context) (uid uint32, ok bool) {
	uid, ok = ctx.Value(peerKey{}).(uint32)
	return uid, ok
}

// withPeer records the connecting process's uid, from the kernel rather than
// from anything the client says.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	cred, err := peerCred(uc)
	if err != nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, cred.Uid)
}

// peerCred is the kernel's record of the process at the other end: the
// client for the server, and for a client the server as it was when it
// called listen(2).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil {
		return nil, cerr
	}
	return cred, err
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
	if err := h.b.Complete(r.Context(), peer, code, q.Get("reason")); err != nil {
		status := http.StatusBadRequest
		var f interface{ Forbidden() bool }
		if errors.As(err, &f) && f.Forbidden() {
			status = http.StatusForbidden
		}
		fail(w, status, "%v", err)
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
	ok, why := h.b.Drain(ctx)
	if !ok {
		reply(w, http.StatusGatewayTimeout, map[string]any{"drained": false, "reason": why})
		return
	}
	reply(w, http.StatusOK, map[string]any{"drained": true, "reason": why})
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
