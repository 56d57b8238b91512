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
	"fmt"
	"log/slog"
	"path/filepath"
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

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

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
