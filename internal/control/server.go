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
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

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
	h      *handler
	ln     *net.UnixListener
	path   string
	dir    int    // the socket's directory, open until Close
	ino    uint64 // the socket file we bound, the only one Close removes
	once   sync.Once
	base   context.Context // every request's, ended at Close
	cancel context.CancelFunc
	log    *slog.Logger

	// Bounds on a connection's reads, fields so that tests can shorten
	// them: headTimeout from a request's first byte (from the accept, for
	// the first request) to its blank line, idleTimeout between requests.
	headTimeout, idleTimeout time.Duration

	connMu  sync.Mutex
	conns   map[*net.UnixConn]bool // the open connections: true while one answers a request
	closing bool
	gone    chan struct{} // closed once closing and conns is empty
	settled bool          // gone is closed

	markMu   sync.Mutex
	markable bool // no --allowed-uids: every uid may hear readiness
	marked   bool // the ready mark is on the socket file
	closed   bool // the socket file is gone, or going
}

// Listen creates the socket in the control directory dir, replacing a stale
// one left by an earlier run. allowed, when not empty, is the list of uids
// that may connect.
func Listen(dir string, b Backend, allowed []uint32, log *slog.Logger) (*Server, error) {
	if err := CheckSocketPath(dir); err != nil {
		return nil, err
	}
	path := SocketPath(dir)
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
	base, cancel := context.WithCancel(context.Background())
	return &Server{
		h:           &handler{b: b, allowed: allowed, log: log},
		base:        base,
		cancel:      cancel,
		log:         log,
		markable:    len(allowed) == 0,
		path:        path,
		dir:         sd,
		ino:         ino,
		ln:          ln,
		headTimeout: readTimeout,
		idleTimeout: idleTimeout,
		// No cap on connections, unlike the health port: only the pod can
		// reach this socket, every request is bounded in time, and a cap
		// would hide the peer's credentials behind its wrapper.
		conns: make(map[*net.UnixConn]bool),
		gone:  make(chan struct{}),
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
func (s *Server) Serve() error {
	for {
		c, err := http1.Accept(s.ln, func(err error, wait time.Duration) {
			s.log.Warn("control socket: cannot accept a connection; retrying", "in", wait, "err", err)
		})
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		if uc := c.(*net.UnixConn); s.track(uc) {
			go s.serve(uc)
		}
	}
}

// Close stops serving and removes the socket file. Long polls are ended
// with their answer and answers being written are delivered (the request
// that ended the job gets its 202), within closeGrace; then what is left
// is cut. Connections between requests are closed at once.
func (s *Server) Close() error {
	s.cancel()
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed before
	}
	s.connMu.Lock()
	s.closing = true
	for c, busy := range s.conns {
		if !busy {
			c.Close()
		}
	}
	s.settle()
	s.connMu.Unlock()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-s.gone:
	case <-t.C:
		s.connMu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.connMu.Unlock()
	}
	s.unlink()
	return err
}

// closeGrace bounds how long Close waits for answers in flight.
const closeGrace = time.Second

// track adds c to the open connections, or closes it if the server is
// closing.
func (s *Server) track(c *net.UnixConn) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.closing {
		c.Close()
		return false
	}
	s.conns[c] = false
	return true
}

// busy marks c as answering a request, or as between requests. It reports
// false when the server is closing: then the connection must end (Close
// has closed it already if it was between requests).
func (s *Server) busy(c *net.UnixConn, busy bool) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = busy
	return true
}

// forget closes c and drops it from the open connections.
func (s *Server) forget(c *net.UnixConn) {
	c.Close()
	s.connMu.Lock()
	defer s.connMu.Unlock()
	delete(s.conns, c)
	s.settle()
}

// settle tells Close that the last connection has ended. connMu is held.
func (s *Server) settle() {
	if s.closing && len(s.conns) == 0 && !s.settled {
		s.settled = true
		close(s.gone)
	}
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
	uid, ok = ctx.Value(peerKey{}).(uint32)
	return uid, ok
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

// conn is one connection of the socket, served by one goroutine.
type conn struct {
	s   *Server
	c   *net.UnixConn
	ctx context.Context // the server's, with the peer's uid
	in  []byte          // the request head being read
	n   int             // bytes of in read and not yet answered
	out []byte          // the answer being written
}

// serve answers the requests of one connection in turn, until the client
// closes it or asks to, errs or times out, or the server closes.
func (s *Server) serve(c *net.UnixConn) {
	defer s.forget(c)
	defer func() {
		// As net/http did: a bug in answering one request must not take the
		// proxy's supervisor down.
		if v := recover(); v != nil {
			s.log.Error("control socket: panic serving a request", "panic", v, "stack", string(debug.Stack()))
		}
	}()
	cn := &conn{s: s, c: c, ctx: s.base, in: make([]byte, maxHeader)}
	// The uid is read once: it is the process that connected, whatever it
	// sends later.
	if cred, err := peerCred(c); err == nil {
		cn.ctx = context.WithValue(cn.ctx, peerKey{}, cred.Uid)
	}
	// The first head is timed from the accept; later ones may keep the
	// connection idle first.
	for idle := time.Duration(0); ; idle = s.idleTimeout {
		var end int
		var err error
		end, cn.n, err = http1.ReadHead(c, cn.in, cn.n, s.headTimeout, idle)
		if errors.Is(err, http1.ErrHeadTooLarge) {
			cn.write(fail(431, "request head larger than %d bytes", maxHeader), true)
			return
		}
		if err != nil {
			return
		}
		req, ok := http1.ParseRequest(cn.in[:end])
		if !ok {
			cn.write(fail(400, "malformed request head"), true)
			return
		}
		if !s.busy(c, true) {
			return
		}
		// A request with a body, and an answer to HEAD, end the
		// connection: the body would be read as the next request, and the
		// answer's body as the client's next answer.
		done := cn.answer(&req, req.Close || req.Body || string(req.Method) == "HEAD")
		cn.n = copy(cn.in, cn.in[end:cn.n]) // a byte of the next request, at most
		if done || !s.busy(c, false) {
			return
		}
	}
}

// answer serves the request r and sends its answer, after which the
// connection ends if end is set, the client went away or the server is
// closing; done reports that it ends. Meanwhile it reads
// the connection, so that a client that goes away (gives up a long poll)
// ends the request's context. That read takes one byte at most, which stays
// in in: the clients never pipeline, so it is the start of their next
// request. The answer is written before that read is ended: ending it waits
// for the reading goroutine, and a goroutine that the request woke (the
// stop that a job's completion starts) would run first, with the answer
// held back behind it.
func (cn *conn) answer(r *http1.Request, end bool) (done bool) {
	ctx, cancel := context.WithCancel(cn.ctx)
	defer cancel()
	cn.c.SetReadDeadline(time.Time{})
	next := cn.in[cn.n:min(cn.n+1, len(cn.in))]
	type result struct {
		n   int
		err error
	}
	read := make(chan result, 1)
	go func() {
		n, err := cn.c.Read(next)
		if err != nil {
			cancel()
		}
		read <- result{n, err}
	}()
	a := cn.s.h.handle(ctx, r)
	// ctx ends when the client went away or the server is closing.
	end = end || ctx.Err() != nil
	sent := cn.write(a, end)
	cn.c.SetReadDeadline(time.Unix(1, 0)) // ends the read, with what it got
	res := <-read
	cn.n += res.n
	gone := res.err != nil && !errors.Is(res.err, os.ErrDeadlineExceeded)
	return end || !sent || gone
}

// write sends the answer a, asking the client to close the connection
// after it when end is set. A client that does not read it has writeSlack.
func (cn *conn) write(a answer, end bool) bool {
	body, err := json.Marshal(a.body)
	if err != nil {
		a = fail(500, "encode the answer: %v", err)
		body, _ = json.Marshal(a.body)
	}
	extra := ""
	if a.allow != "" {
		extra = "Allow: " + a.allow + "\r\n"
	}
	cn.out = http1.AppendHead(cn.out[:0], a.code, "application/json", len(body)+1, extra, end)
	cn.out = append(append(cn.out, body...), '\n')
	cn.c.SetWriteDeadline(time.Now().Add(writeSlack))
	_, err = cn.c.Write(cn.out)
	return err == nil
}

type handler struct {
	b       Backend
	allowed []uint32
	log     *slog.Logger
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

// endpoint is one path of the socket: its method, the query parameters it
// takes, and what answers it.
type endpoint struct {
	method string
	params []string
	serve  func(h *handler, ctx context.Context, q url.Values) answer
}

func lookup(path string) (endpoint, bool) {
	switch path {
	case "/v1/ready":
		return endpoint{"GET", []string{"wait"}, (*handler).ready}, true
	case "/v1/complete":
		return endpoint{"POST", []string{"exit_code", "peer", "reason"}, (*handler).complete}, true
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
	// slow client to trickle, so none is accepted (serve ends the
	// connection, whose next bytes would be that body).
	if r.Body {
		return fail(400, "requests take no body; parameters go in the query")
	}
	path, err := url.PathUnescape(string(r.Path))
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
	q, err := url.ParseQuery(string(r.Query))
	if err != nil {
		return fail(400, "%v", err)
	}
	for k := range q {
		if !slices.Contains(ep.params, k) {
			return fail(400, "unknown parameter %q", k)
		}
	}
	return ep.serve(h, ctx, q)
}

func (h *handler) ready(ctx context.Context, q url.Values) answer {
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

func (h *handler) complete(ctx context.Context, q url.Values) answer {
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
	if err := h.b.Complete(ctx, peer, code, q.Get("reason")); err != nil {
		status := 400
		var f interface{ Forbidden() bool }
		if errors.As(err, &f) && f.Forbidden() {
			status = 403
		}
		return fail(status, "%v", err)
	}
	return reply(202, map[string]any{"recorded": true, "peer": peer, "exit_code": code})
}

func (h *handler) drain(ctx context.Context, q url.Values) answer {
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

func (h *handler) status(context.Context, url.Values) answer {
	return reply(200, h.b.Status())
}

// DefaultPeer is the peer name when none is given.
const DefaultPeer = "app"

func waitParam(q url.Values) (time.Duration, error) {
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
