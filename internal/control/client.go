package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
)

// Client speaks to the control socket in a control directory. Its requests
// share a kept connection while the supervisor keeps it open: exec's
// completion goes over the connection that asked for readiness.
type Client struct {
	path    string
	trusted []uint32 // uids that may serve the socket
	http    *http1.Client
}

// IstioProxyUID is the uid Istio reserves for its proxy, and so for the
// supervisor that runs it: its traffic bypasses the mesh's capture, so no
// app runs as it.
const IstioProxyUID = 1337

// NewClient returns a client of the socket in the control directory dir.
// It talks only to a server whose uid, as the kernel reports it
// (SO_PEERCRED), may be the supervisor's: root, this process's own uid,
// IstioProxyUID, or one of supervisorUIDs. Any other uid serving the socket
// replaced it, and every call then fails with an *UntrustedError.
func NewClient(dir string, supervisorUIDs ...uint32) *Client {
	path := SocketPath(dir)
	trusted := append([]uint32{0, uint32(os.Geteuid()), IstioProxyUID}, supervisorUIDs...)
	return &Client{
		path:    path,
		trusted: trusted,
		http: &http1.Client{
			Dial:    func(ctx context.Context) (net.Conn, error) { return dialTrusted(ctx, path, trusted) },
			Host:    "control",
			MaxBody: maxAnswer,
		},
	}
}

// Trusts reports whether uid may be the supervisor's, as for the socket's
// server: what a client also asks of the owner of peers/ before it writes
// its records there.
func (c *Client) Trusts(uid uint32) bool { return slices.Contains(c.trusted, uid) }

// maxAnswer bounds an answer of the supervisor's; its largest, /v1/status,
// is a few kilobytes.
const maxAnswer = 1 << 20

// UntrustedError is a socket served by a uid that is not trusted to be the
// supervisor's.
type UntrustedError struct {
	Path string
	UID  uint32
}

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("control socket %s is served by uid %d, which is not trusted to be the supervisor (trusted: 0, %d and this process's uid %d); if the supervisor runs as uid %d, pass --supervisor-uid %d or set PROXY_SUPERVISOR_SUPERVISOR_UID=%d",
		e.Path, e.UID, IstioProxyUID, os.Geteuid(), e.UID, e.UID, e.UID)
}

func dialTrusted(ctx context.Context, path string, trusted []uint32) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialUnix(ctx, "unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	cred, err := peerCred(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s: the server's credentials: %w", path, err)
	}
	if !slices.Contains(trusted, cred.Uid) {
		c.Close()
		return nil, &UntrustedError{Path: path, UID: cred.Uid}
	}
	return c, nil
}

// Path is the socket's path.
func (c *Client) Path() string { return c.path }

// Unavailable reports whether err means that no supervisor listens on the
// socket (yet, or any more), as opposed to one that answered.
func Unavailable(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// Rejected reports whether err is the supervisor rejecting a request (a 4xx
// answer: bad input, or a uid it does not allow), or a socket served by a
// uid not trusted to be the supervisor. Asking again gets the same answer,
// so a client gives up at once.
func Rejected(err error) bool {
	var e *APIError
	var u *UntrustedError
	return errors.As(err, &e) && e.Code >= 400 && e.Code < 500 || errors.As(err, &u)
}

// APIError is an answer with an error status.
type APIError struct {
	Code int
	Msg  string
}

func (e *APIError) Error() string { return e.Msg }

func (c *Client) do(ctx context.Context, method, path string, q http1.Query, out any) (int, error) {
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	// Every request of this API may be sent twice (a completion recorded
	// again, a drain joined), which the client's one resend on a fresh
	// connection, when the server closed a kept one under it, needs.
	resp, err := c.http.Do(ctx, method, target)
	if u := (*UntrustedError)(nil); errors.As(err, &u) {
		return 0, u // it says all
	}
	if err != nil {
		return 0, fmt.Errorf("control socket %s: %s: %w", c.path, path, err)
	}
	if resp.Code >= 400 && resp.Code < 500 {
		var e struct{ Error string }
		if json.Unmarshal(resp.Body, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%d %s", resp.Code, resp.Status)
		}
		return resp.Code, &APIError{resp.Code, e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(resp.Body, out); err != nil {
			return resp.Code, fmt.Errorf("control socket %s: %s: %w", c.path, path, err)
		}
	}
	return resp.Code, nil
}

// Ready long-polls GET /v1/ready for up to wait. It returns false with the
// supervisor's reason when the proxy did not become ready in that time.
//
// A socket file with the ready mark (Server.MarkReady) answers without a
// request: a connection to it proves that a trusted supervisor listens
// there, and the mark, read again after the connection, that it is ready,
// just as a 200 would have said. A stale mark (a supervisor killed while
// ready) cannot pass, since nothing accepts connections any more; a new
// supervisor binds a new socket file, without the mark.
func (c *Client) Ready(ctx context.Context, wait time.Duration) (bool, string, error) {
	if conn, ok := c.dialMarked(ctx); ok {
		// exec's completion goes over it: the server keeps a new
		// connection for its first request for a while (headTimeout),
		// and a kept connection it closed meanwhile is dialled again.
		c.http.Keep(conn)
		return true, "", nil
	}
	var out struct {
		Ready  bool
		Reason string
	}
	code, err := c.do(ctx, "GET", "/v1/ready", http1.Query{{Key: "wait", Value: wait.String()}}, &out)
	if err != nil {
		return false, "", err
	}
	if code != 200 && code != 503 {
		return false, "", fmt.Errorf("control socket: /v1/ready answered %d", code)
	}
	return out.Ready, out.Reason, nil
}

// dialMarked connects to the socket if, and only if, the socket it connects
// to carries the ready mark. The mark and the connection must be checked on
// the same socket file: each path lookup resolves the control dir anew, and
// where that dir is not sticky (Istio's root-owned emptyDir, which a
// supervisor of uid 1337 cannot make sticky) any uid can swap sock/ with
// the sock/ a SIGKILLed supervisor left behind (renameat2 RENAME_EXCHANGE)
// between the lookups: the stale, marked file is then read while the
// connection reaches the live supervisor that is not ready, and both are
// trusted uids. So sock/ is opened once, and the file is read (fstatat)
// and connected to (through /proc/self/fd/N/, as the server binds it)
// relative to that one descriptor. Only the supervisor may change what
// control.sock names in it, which fstat of the descriptor checks: a
// directory of a trusted uid that no other uid can write. A check on the
// connected socket itself cannot do it: the mark is the file's mode, and a
// socket descriptor's fstat describes the socket, not the file. Without
// /proc the mark is not used, and the request answers instead.
func (c *Client) dialMarked(ctx context.Context) (net.Conn, bool) {
	// No trailing slash: with one, O_NOFOLLOW would still follow a symlink.
	dir, name := filepath.Dir(c.path), filepath.Base(c.path)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if unix.Fstat(dfd, &st) != nil || st.Mode&0o022 != 0 || !slices.Contains(c.trusted, st.Uid) || !c.markedAt(dfd, name) {
		return nil, false
	}
	conn, err := dialTrusted(ctx, fmt.Sprintf("/proc/self/fd/%d/%s", dfd, name), c.trusted)
	if err != nil {
		return nil, false
	}
	if !c.markedAt(dfd, name) { // cleared while we connected
		conn.Close()
		return nil, false
	}
	return conn, true
}

// markedAt reports whether name in the directory dfd carries the ready
// mark, and is a socket owned by a uid trusted to be the supervisor.
func (c *Client) markedAt(dfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK &&
		st.Mode&ReadyMark != 0 && slices.Contains(c.trusted, st.Uid)
}

// Complete reports how a peer ended.
func (c *Client) Complete(ctx context.Context, done Completion) error {
	q := http1.Query{{Key: "exit_code", Value: strconv.Itoa(done.Code)}, {Key: "peer", Value: done.Peer}}
	if done.Reason != "" {
		q = append(q, http1.Param{Key: "reason", Value: done.Reason})
	}
	if done.StopSignal != "" {
		q = append(q, http1.Param{Key: "stop_signal", Value: done.StopSignal},
			http1.Param{Key: "stopped_at", Value: done.StoppedAt.Format(time.RFC3339Nano)})
	}
	status, err := c.do(ctx, "POST", "/v1/complete", q, nil)
	if err == nil && status != 202 {
		err = fmt.Errorf("control socket: /v1/complete answered %d", status)
	}
	return err
}

// Drain asks for the drain and waits up to wait for it to end. It returns
// false with the supervisor's reason when the drain ended by its bound.
func (c *Client) Drain(ctx context.Context, wait time.Duration) (bool, string, error) {
	var out struct {
		Drained bool
		Reason  string
	}
	code, err := c.do(ctx, "POST", "/v1/drain", http1.Query{{Key: "wait", Value: wait.String()}}, &out)
	if err != nil {
		return false, "", err
	}
	if code != 200 && code != 504 {
		return false, "", fmt.Errorf("control socket: /v1/drain answered %d", code)
	}
	return out.Drained, out.Reason, nil
}

// Status returns the supervisor's state as raw JSON.
func (c *Client) Status(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	_, err := c.do(ctx, "GET", "/v1/status", nil, &out)
	return out, err
}
