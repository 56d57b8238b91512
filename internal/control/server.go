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
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/completion"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
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

// CheckSocketPath reports whether the socket's path in dir fits a unix
// socket address: if not, no client could ever reach the supervisor.
func CheckSocketPath(dir string) error {
	max := len(unix.RawSockaddrUnix{}.Path) - 1
	if path := SocketPath(dir); len(path) > max {
		return fmt.Errorf("control socket %s: path longer than a unix socket address takes (%d bytes)", path, max)
	}
	return nil
}

// Bounds on requests. Long polls are capped at MaxWait; clients that want to
// wait longer ask again.
const (
	MaxWait     = 5 * time.Minute
	readTimeout = 5 * time.Second // the whole request: there is no body to wait for
	idleTimeout = 30 * time.Second
	maxHeader   = 8 << 10
	// writeSlack is what the write of an answer may take once it is
	// ready, long poll or not: a client that does not read is cut then.
	writeSlack = 10 * time.Second
	// closeGrace bounds how long Close waits for answers in flight.
	closeGrace = time.Second
	// hookExit bounds how long Close waits for the processes that asked
	// for a drain to exit once answered (see hooks).
	hookExit = 5 * time.Second
)

// Backend is what the socket serves. The supervisor implements it.
type Backend interface {
	// WaitReady blocks until the proxy can carry the app's traffic or ctx
	// ends, and says why not when it cannot.
	WaitReady(ctx context.Context) (ready bool, why string)
	// Complete records that a peer finished; ctx carries the caller's uid
	// (CallerUID). An error means bad input (400), or a refusal of the
	// caller (403) when it has a method Forbidden that returns true.
	Complete(ctx context.Context, c Completion) error
	// Drain starts the drain if it has not started, and waits until it ends
	// or ctx does. It reports whether the drain condition was met, and why
	// not.
	Drain(ctx context.Context) (drained bool, why string)
	// Status is the supervisor's state.
	Status() Status
}

// Status is the supervisor's state, the body of GET /v1/status.
type Status struct {
	State    string                     `json:"state"`
	ProxyPID int                        `json:"proxy_pid"`
	Ready    bool                       `json:"ready"`
	Reason   string                     `json:"reason,omitempty"`
	Draining bool                       `json:"draining"`
	Peers    map[string]completion.Peer `json:"peers"`
	Pending  []string                   `json:"pending,omitempty"`
	Awaiting int                        `json:"awaiting"`
	// RecordsError: peers/ no longer names the records directory the
	// supervisor reads (completion.Book.Replaced).
	RecordsError string  `json:"records_error,omitempty"`
	ExitCode     *int    `json:"exit_code,omitempty"` // once fixed
	DecidedBy    string  `json:"decided_by,omitempty"`
	Uptime       float64 `json:"uptime_seconds"`
}

// Completion is what POST /v1/complete reports: how a peer ended.
type Completion struct {
	Peer   string
	Code   int
	Reason string // exited, signaled or not-ready; empty is exited
	// StopSignal names the stop signal that exec received from outside and
	// forwarded to the app before it ended (the kubelet stopping the app
	// container), and StoppedAt says when; empty when none came.
	StopSignal string
	StoppedAt  time.Time
}

// Server serves the control socket. New builds it; Listen binds it.
type Server struct {
	srv     *http1.Server
	handler *handler
	hooks   *hooks
	// hookExit bounds the wait for the drain's callers in Close.
	hookExit time.Duration
	cdir     string // the control directory
	path     string
	dir      int    // the socket's directory, open until Close
	ino      uint64 // the socket file we bound, the only one Close removes
	once     sync.Once
	log      *slog.Logger
	tune     func(*http1.Config) // changes the connections' bounds (tests)

	markMu   sync.Mutex
	markable bool // no --allowed-uids: every uid may hear readiness
	marked   bool // the ready mark is on the socket file
	closed   bool // the socket file is gone, or going
}

// New returns the server of the socket in the control directory dir,
// unbound: it touches nothing until Listen. allowed, when not empty, is
// the list of uids that may connect.
func New(dir string, b Backend, allowed []uint32, log *slog.Logger) *Server {
	h := &handler{b: b, allowed: allowed, log: log, hooks: &hooks{}}
	return &Server{
		handler:  h,
		hooks:    h.hooks,
		hookExit: hookExit,
		log:      log,
		markable: len(allowed) == 0,
		cdir:     dir,
		path:     SocketPath(dir),
		dir:      -1,
	}
}

// Listen creates the socket in the control directory, replacing a stale
// one left by an earlier run. Serve and Close follow it.
func (s *Server) Listen() error {
	dir := s.cdir
	if err := CheckSocketPath(dir); err != nil {
		return err
	}
	cfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("control socket: open control dir %s: %w", dir, err)
	}
	defer unix.Close(cfd)
	stick(cfd, dir, s.log)
	sd, err := openSocketDir(cfd, filepath.Join(dir, SocketDir))
	if err != nil {
		return err
	}
	ln, ino, err := bindIn(sd, s.path)
	if err != nil {
		unix.Close(sd)
		return err
	}
	cfg := http1.Config{
		Name:    "control socket",
		Handler: s.handler.serve,
		Refuse: func(code int, why string, body []byte) http1.Answer {
			if code == 431 {
				why = fmt.Sprintf("request head larger than %d bytes", maxHeader)
			}
			return render(fail(code, "%s", why), body)
		},
		ConnContext: withPeer,
		// Long polls end when their client gives up.
		CancelOnHangup: true,
		MaxHead:        maxHeader,
		HeadTimeout:    readTimeout,
		IdleTimeout:    idleTimeout,
		WriteTimeout:   writeSlack,
		Grace:          closeGrace,
		Log:            s.log,
		// No cap on connections, unlike the health port: only the pod can
		// reach this socket, and every request is bounded in time.
	}
	if s.tune != nil {
		s.tune(&cfg)
	}
	s.srv, s.dir, s.ino = http1.NewServer(ln, cfg), sd, ino
	return nil
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
	return chmodSocket(sd, 0o666, func(st *unix.Stat_t) error {
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return errors.New("replaced by something that is not a socket right after the bind")
		}
		return nil
	})
}

// chmodSocket sets the mode of the socket file in sd and returns its inode.
// It goes through an O_PATH descriptor of the file, opened without
// following a symlink and checked by is before the chmod: a chmod by path
// could follow whatever is there by then.
func chmodSocket(sd int, mode uint32, is func(*unix.Stat_t) error) (uint64, error) {
	fd, err := unix.Openat(sd, SocketName, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if err := is(&st); err != nil {
		return 0, err
	}
	return st.Ino, unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode)
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
	d := net.Dialer{Timeout: 100 * time.Millisecond}
	if c, err := d.DialUnix(context.Background(), "unix", nil, &net.UnixAddr{Name: via, Net: "unix"}); err == nil {
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
	_, err := chmodSocket(s.dir, mode, func(st *unix.Stat_t) error {
		if st.Ino != s.ino {
			return errors.New("not the socket this supervisor bound")
		}
		return nil
	})
	if err != nil {
		s.log.Warn("control socket: cannot set its ready mark; clients will ask instead", "ready", ready, "err", err)
		return
	}
	s.marked = ready
}

// Serve serves until Close, and then returns nil.
func (s *Server) Serve() error { return s.srv.Serve() }

// Close stops serving and removes the socket file. Long polls are ended
// with their answer and answers being written are delivered (the request
// that ended the job gets its 202), within closeGrace; then what is left
// is cut. Connections between requests are closed at once. Last, it waits
// up to hookExit for every process that asked for a drain to exit.
func (s *Server) Close() error {
	if s.srv == nil { // never bound
		return nil
	}
	err := s.srv.Close()
	s.unlink()
	s.hooks.wait(s.hookExit, s.log)
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

type peerKey struct{}

// CallerUID is the uid of the process that made the request, from the
// kernel (SO_PEERCRED) rather than from anything the client says. ok is
// false for a context that did not come from the socket.
func CallerUID(ctx context.Context) (uid uint32, ok bool) {
	cred, ok := ctx.Value(peerKey{}).(*unix.Ucred)
	if !ok {
		return 0, false
	}
	return cred.Uid, true
}

// callerPID is the pid of the process that made the request, in this
// process's pid namespace; 0 when it is not in it, or unknown.
func callerPID(ctx context.Context) int {
	if cred, ok := ctx.Value(peerKey{}).(*unix.Ucred); ok {
		return int(cred.Pid)
	}
	return 0
}

// withPeer adds to ctx the credentials of the process at the other end of
// c. They are read once: it is the process that connected, whatever it
// sends later.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	if uc, ok := c.(*net.UnixConn); ok {
		if cred, err := peerCred(uc); err == nil {
			return context.WithValue(ctx, peerKey{}, cred)
		}
	}
	return ctx
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
	hooks   *hooks
}

// answer is what a request gets: a status and a value to send as JSON.
type answer struct {
	code  int
	body  any
	allow string // the Allow header of a 405
}

func reply(code int, v any) answer { return answer{code: code, body: v} }

func fail(code int, format string, args ...any) answer {
	return reply(code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// serve answers r as JSON.
func (h *handler) serve(ctx context.Context, r *http1.Request, body []byte) http1.Answer {
	return render(h.handle(ctx, r), body)
}

// render encodes a, on one line, after body.
func render(a answer, body []byte) http1.Answer {
	b, err := json.Marshal(a.body)
	if err != nil {
		a = fail(500, "encode the answer: %v", err)
		b, _ = json.Marshal(a.body)
	}
	extra := ""
	if a.allow != "" {
		extra = "Allow: " + a.allow + "\r\n"
	}
	return http1.Answer{Code: a.code, Type: "application/json", Extra: extra, Body: append(append(body, b...), '\n')}
}

// endpoint is one path of the socket: its method, the query parameters it
// takes, and what answers it.
type endpoint struct {
	method string
	params []string
	serve  func(h *handler, ctx context.Context, q http1.Query) answer
}

func lookup(path string) (endpoint, bool) {
	switch path {
	case "/v1/ready":
		return endpoint{"GET", []string{"wait"}, (*handler).ready}, true
	case "/v1/complete":
		return endpoint{"POST", []string{"exit_code", "peer", "reason", "stop_signal", "stopped_at"}, (*handler).complete}, true
	case "/v1/drain":
		return endpoint{"POST", []string{"wait"}, (*handler).drain}, true
	case "/v1/status":
		return endpoint{"GET", nil, (*handler).status}, true
	}
	return endpoint{}, false
}

// handle answers r, once it has what every request owes: an allowed uid,
// no body, a known path, the right method and known query parameters.
func (h *handler) handle(ctx context.Context, r *http1.Request) answer {
	if len(h.allowed) > 0 {
		uid, ok := CallerUID(ctx)
		if !ok || !slices.Contains(h.allowed, uid) {
			h.log.Warn("control socket: refused a client", "uid", uid, "path", string(r.Path))
			return fail(403, "uid %d is not in --allowed-uids", uid)
		}
	}
	// Everything is in the query. A body would only be something for a
	// slow client to trickle, so none is accepted (the connection ends,
	// whose next bytes would be that body).
	if r.Body {
		return fail(400, "requests take no body; parameters go in the query")
	}
	path, err := http1.PathUnescape(string(r.Path))
	if err != nil {
		return fail(400, "%v", err)
	}
	ep, ok := lookup(path)
	if !ok {
		return fail(404, "no such endpoint: %s", path)
	}
	if string(r.Method) != ep.method {
		a := fail(405, "%s needs %s, not %s", path, ep.method, r.Method)
		a.allow = ep.method
		return a
	}
	q, err := http1.ParseQuery(string(r.Query))
	if err != nil {
		return fail(400, "%v", err)
	}
	for _, p := range q {
		if !slices.Contains(ep.params, p.Key) {
			return fail(400, "unknown parameter %q", p.Key)
		}
	}
	return ep.serve(h, ctx, q)
}

func (h *handler) ready(ctx context.Context, q http1.Query) answer {
	wait, err := waitParam(q)
	if err != nil {
		return fail(400, "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if ok, why := h.b.WaitReady(ctx); !ok {
		return reply(503, map[string]any{"ready": false, "reason": why})
	}
	return reply(200, map[string]any{"ready": true})
}

func (h *handler) complete(ctx context.Context, q http1.Query) answer {
	raw := q.Get("exit_code")
	if raw == "" {
		return fail(400, "exit_code is required")
	}
	code, err := strconv.Atoi(raw)
	if err != nil || code < 0 || code > 255 {
		return fail(400, "exit_code %q: want an integer from 0 to 255", raw)
	}
	peer := q.Get("peer")
	if peer == "" {
		peer = DefaultPeer
	}
	c := Completion{Peer: peer, Code: code, Reason: q.Get("reason"), StopSignal: q.Get("stop_signal")}
	if at := q.Get("stopped_at"); at != "" {
		if c.StoppedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return fail(400, "stopped_at %q: want an RFC 3339 time", at)
		}
	}
	if err := h.b.Complete(ctx, c); err != nil {
		status := 400
		var f interface{ Forbidden() bool }
		if errors.As(err, &f) && f.Forbidden() {
			status = 403
		}
		return fail(status, "%v", err)
	}
	return reply(202, map[string]any{"recorded": true, "peer": peer, "exit_code": code})
}

func (h *handler) drain(ctx context.Context, q http1.Query) answer {
	h.hooks.add(callerPID(ctx))
	if q.Has("wait") {
		wait, err := waitParam(q)
		if err != nil {
			return fail(400, "%v", err)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	ok, why := h.b.Drain(ctx)
	if !ok {
		return reply(504, map[string]any{"drained": false, "reason": why})
	}
	return reply(200, map[string]any{"drained": true, "reason": why})
}

func (h *handler) status(context.Context, http1.Query) answer {
	return reply(200, h.b.Status())
}

// DefaultPeer is the peer name when none is given.
const DefaultPeer = "app"

func waitParam(q http1.Query) (time.Duration, error) {
	raw := q.Get("wait")
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("wait %q: want a duration such as 30s", raw)
	}
	return min(d, MaxWait), nil
}
