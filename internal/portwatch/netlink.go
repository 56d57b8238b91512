package portwatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// golang.org/x/sys/unix has the netlink header and constants but no inet_diag
// structures and no TCP state numbers, so their layout from linux/inet_diag.h and
// net/tcp_states.h is spelled out here, as byte offsets rather than Go structs so that
// parsing needs neither unsafe nor a copy per socket.
const (
	tcpListen = 10 // TCP_LISTEN

	sizeofInetDiagReqV2 = 56 // struct inet_diag_req_v2
	sizeofInetDiagMsg   = 72 // struct inet_diag_msg

	// Offsets into struct inet_diag_msg. Ports and addresses are big-endian; the
	// rest is host order like every other netlink field.
	diagFamily = 0
	diagState  = 1
	diagSport  = 4
	diagDport  = 6
	diagSrc    = 8
	diagUID    = 64
	diagInode  = 68
)

const (
	// dumpTries bounds the re-runs of a dump the kernel flags as interrupted (sockets
	// came and went while it walked them). Listeners change rarely, so a few suffice.
	dumpTries = 5
	// recvTimeout bounds each read, so that a scan cannot hang the drain loop.
	recvTimeout = 500 * time.Millisecond
	// recvBufSize exceeds the 32 KiB the kernel caps a dump datagram at, so a read that
	// fills the buffer is a sign of truncation rather than a normal answer.
	recvBufSize = 64 << 10
)

// diagConn is the netlink socket as the dump loop sees it, so that the loop's retry
// and error handling can be tested against canned answers.
type diagConn interface {
	send(req []byte) error
	recv(buf []byte) (int, error)
	close() error
}

type netlinkConn struct {
	fd     int
	kernel unix.SockaddrNetlink
}

func dialNetlink() (diagConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("open netlink sock_diag socket: %w", err)
	}
	tv := unix.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("set netlink receive timeout: %w", err)
	}
	return &netlinkConn{fd: fd, kernel: unix.SockaddrNetlink{Family: unix.AF_NETLINK}}, nil
}

func (c *netlinkConn) send(req []byte) error {
	for {
		err := unix.Sendto(c.fd, req, 0, &c.kernel)
		if err != unix.EINTR {
			return err
		}
	}
}

func (c *netlinkConn) recv(buf []byte) (int, error) {
	for {
		n, err := unix.Read(c.fd, buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, fmt.Errorf("no sock_diag answer within %v: %w", recvTimeout, err)
		case err != nil:
			return 0, err
		}
		return n, nil
	}
}

func (c *netlinkConn) close() error { return unix.Close(c.fd) }

// diagRequest asks for every TCP socket of family in state LISTEN. The state filter is
// what keeps a scan's cost independent of the number of established connections: the
// kernel skips them instead of serialising them for us to discard.
func diagRequest(family uint8, seq uint32) [unix.NLMSG_HDRLEN + sizeofInetDiagReqV2]byte {
	var b [unix.NLMSG_HDRLEN + sizeofInetDiagReqV2]byte
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(b[8:], seq)
	// pid 0 lets the kernel address the answer to this socket's port id.
	req := b[unix.NLMSG_HDRLEN:]
	req[0] = family
	req[1] = unix.IPPROTO_TCP
	ne.PutUint32(req[4:], 1<<tcpListen)
	return b
}

// dumpFamily appends family's listeners to dst. A dump the kernel flags as
// interrupted may have skipped or repeated sockets, so it is thrown away and re-run.
func dumpFamily(c diagConn, buf []byte, family uint8, dst []Socket) ([]Socket, error) {
	base := len(dst)
	for try := 1; ; try++ {
		dst = dst[:base]
		// The request goes out from buf, which its answer then overwrites, so
		// that a scan allocates nothing.
		req := diagRequest(family, uint32(try))
		if err := c.send(buf[:copy(buf, req[:])]); err != nil {
			return dst, fmt.Errorf("send sock_diag request: %w", err)
		}
		var interrupted bool
		for done := false; !done; {
			n, err := c.recv(buf)
			if err != nil {
				return dst[:base], fmt.Errorf("read sock_diag answer: %w", err)
			}
			if n >= len(buf) {
				return dst[:base], fmt.Errorf("sock_diag answer of %d bytes may be truncated", n)
			}
			var st diagStatus
			dst, st, err = parseDiag(buf[:n], dst)
			if err != nil {
				return dst[:base], err
			}
			interrupted = interrupted || st.interrupted
			done = st.done
		}
		if !interrupted {
			return dst, nil
		}
		if try == dumpTries {
			return dst[:base], fmt.Errorf("sock_diag dump interrupted %d times in a row", dumpTries)
		}
	}
}

// diagStatus is what a datagram says about the dump it belongs to.
type diagStatus struct {
	done        bool // the dump has ended (NLMSG_DONE, or NLMSG_ERROR)
	interrupted bool // NLM_F_DUMP_INTR: sockets changed during the dump
}

// parseDiag appends the listening sockets in one netlink datagram to dst.
func parseDiag(b []byte, dst []Socket) ([]Socket, diagStatus, error) {
	var st diagStatus
	ne := binary.NativeEndian
	for len(b) > 0 {
		if len(b) < unix.NLMSG_HDRLEN {
			return dst, st, fmt.Errorf("netlink: %d trailing bytes, short of a header", len(b))
		}
		size := ne.Uint32(b[0:])
		typ := ne.Uint16(b[4:])
		flags := ne.Uint16(b[6:])
		if size < unix.NLMSG_HDRLEN || uint64(size) > uint64(len(b)) {
			return dst, st, fmt.Errorf("netlink: message length %d outside [%d, %d]", size, unix.NLMSG_HDRLEN, len(b))
		}
		if flags&unix.NLM_F_DUMP_INTR != 0 {
			st.interrupted = true
		}
		payload := b[unix.NLMSG_HDRLEN:size]
		switch typ {
		case unix.NLMSG_DONE:
			// The payload is the dump's own return value, negative on failure.
			st.done = true
			if len(payload) >= 4 {
				if e := int32(ne.Uint32(payload)); e < 0 {
					return dst, st, fmt.Errorf("sock_diag dump failed: %w", errno(e))
				}
			}
			return dst, st, nil
		case unix.NLMSG_ERROR:
			st.done = true
			if len(payload) < 4 {
				return dst, st, fmt.Errorf("netlink: error message with %d-byte payload", len(payload))
			}
			if e := int32(ne.Uint32(payload)); e != 0 {
				return dst, st, fmt.Errorf("sock_diag request refused: %w", errno(e))
			}
			return dst, st, nil
		case unix.SOCK_DIAG_BY_FAMILY:
			s, ok, err := parseInetDiagMsg(payload)
			if err != nil {
				return dst, st, err
			}
			if ok {
				dst = append(dst, s)
			}
		}
		// The last message of a datagram need not be padded to alignment.
		next := (uint64(size) + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		b = b[min(next, uint64(len(b))):]
	}
	return dst, st, nil
}

func parseInetDiagMsg(p []byte) (Socket, bool, error) {
	if len(p) < sizeofInetDiagMsg {
		return Socket{}, false, fmt.Errorf("inet_diag_msg of %d bytes, want %d", len(p), sizeofInetDiagMsg)
	}
	// The request already filtered on LISTEN; this only guards against a kernel that
	// ignored the filter, which would make established sockets look like listeners.
	if p[diagState] != tcpListen {
		return Socket{}, false, nil
	}
	var addr netip.Addr
	switch p[diagFamily] {
	case unix.AF_INET:
		addr = netip.AddrFrom4([4]byte(p[diagSrc:]))
	case unix.AF_INET6:
		addr = netip.AddrFrom16([16]byte(p[diagSrc:]))
	default:
		return Socket{}, false, fmt.Errorf("inet_diag_msg with address family %d", p[diagFamily])
	}
	ne := binary.NativeEndian
	return Socket{
		Addr:  netip.AddrPortFrom(addr, binary.BigEndian.Uint16(p[diagSport:])),
		UID:   ne.Uint32(p[diagUID:]),
		Inode: uint64(ne.Uint32(p[diagInode:])),
	}, true, nil
}

// errno turns netlink's negative error code into an Errno that errors.Is can match.
func errno(e int32) unix.Errno {
	return unix.Errno(-int64(e))
}

// refused reports whether err means this environment will not answer sock_diag at
// all (a seccomp profile, a sandbox such as gVisor, a kernel without inet_diag), as
// opposed to a transient failure worth retrying on the next scan.
func refused(err error) bool {
	var e unix.Errno
	if !errors.As(err, &e) {
		return false
	}
	switch e {
	case unix.EPERM, unix.EACCES, unix.EPROTONOSUPPORT, unix.EAFNOSUPPORT,
		unix.ESOCKTNOSUPPORT, unix.EOPNOTSUPP, unix.ENOENT:
		return true
	}
	return false
}
