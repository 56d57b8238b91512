package control

import (
	"context"
	"net"
	"slices"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"golang.org/x/sys/unix"
)

// Whom the socket serves and how much it gives anyone: the bounds on every
// request, the caller's credentials from the kernel, and --allowed-uids.

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

// refuse answers a caller whose uid is not in --allowed-uids, when that
// list is set; refused is false for a caller that may go on.
func (h *handler) refuse(ctx context.Context, r *http1.Request) (a answer, refused bool) {
	if len(h.allowed) > 0 {
		uid, ok := CallerUID(ctx)
		if !ok || !slices.Contains(h.allowed, uid) {
			h.log.Warn("control socket: refused a client", "uid", uid, "path", string(r.Path))
			return fail(403, "uid %d is not in --allowed-uids", uid), true
		}
	}
	return answer{}, false
}
