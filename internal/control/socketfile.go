package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The socket file on disk: the directory only our uid writes in, the bind
// through it, and the mode bits set on the file after (0666, the ready mark).

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
