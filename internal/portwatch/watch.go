package portwatch

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The kernel's sock_diag destroy broadcast (linux/sock_diag.h): a message for every
// TCP socket of the namespace when it is freed, to the members of these groups.
const (
	sknlgrpInetTCPDestroy  = 1 // SKNLGRP_INET_TCP_DESTROY
	sknlgrpInet6TCPDestroy = 3 // SKNLGRP_INET6_TCP_DESTROY
)

// destroyFilter keeps, in the kernel, the destroy messages of sockets without a peer
// port: listeners, and sockets that never connected. An app's connections, which may
// come and go by the thousand while it drains, then wake nobody.
var destroyFilter = [...]unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: unix.NLMSG_HDRLEN + diagDport},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: 0},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},
}

// OpenScanner is a Scanner held open while its caller waits on listening ports (a drain).
// Its scans reuse one netlink socket, and Closed tells at once that a listening
// socket may be gone, so that the caller need not scan on a short tick to see it.
// An OpenScanner is for one goroutine; Close releases it.
type OpenScanner struct {
	s     *Scanner
	conn  diagConn // kept between scans; nil until the first, and after a failed one
	socks []Socket // the last scan's answer, its array reused by the next

	closed <-chan struct{}
	events *os.File
	done   chan struct{} // closed when the event reader has returned
}

// Open opens an OpenScanner. Where the kernel will not broadcast destroyed sockets (an old
// kernel, a sandbox, the /proc fallback), Closed is nil and the caller polls.
func (s *Scanner) Open() *OpenScanner {
	w := &OpenScanner{s: s}
	if s.Fallback() {
		return w
	}
	f, err := s.listenDestroys()
	if err != nil {
		s.log.Info("sock_diag destroy events unavailable; listening ports are polled", "err", err)
		return w
	}
	closed := make(chan struct{}, 1)
	w.closed, w.events, w.done = closed, f, make(chan struct{})
	go w.read(f, closed)
	return w
}

// Listening scans as Scanner.Listening does. The slice is the OpenScanner's: it is valid
// until the next call, which reuses it, so that a scan allocates nothing.
func (w *OpenScanner) Listening() ([]Socket, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	socks, err := w.s.listening(&w.conn, w.socks)
	if err == nil {
		w.socks = socks
	}
	return socks, err
}

// Closed receives after a listening socket of the namespace was destroyed, or after
// the kernel dropped such news (a full socket buffer); several arrive as one. It is
// closed if the broadcast fails for good, and nil if there was none.
func (w *OpenScanner) Closed() <-chan struct{} { return w.closed }

// Close releases the OpenScanner's sockets and waits for its event reader to return.
func (w *OpenScanner) Close() {
	w.s.mu.Lock()
	if w.conn != nil {
		w.conn.close()
		w.conn = nil
	}
	w.s.mu.Unlock()
	if w.events != nil {
		w.events.Close()
		<-w.done
	}
}

// read turns the broadcast's datagrams into signals on closed until the socket is
// closed. ENOBUFS means some were dropped: a listener may have gone unreported, so it
// signals too.
func (w *OpenScanner) read(f *os.File, closed chan<- struct{}) {
	defer close(w.done)
	buf := make([]byte, 1024) // one message; a longer one is cut, and only its arrival counts
	for {
		_, err := f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil && !errors.Is(err, unix.ENOBUFS) {
			if !errors.Is(err, io.EOF) {
				w.s.log.Warn("sock_diag destroy events failed; listening ports are polled", "err", err)
			}
			close(closed)
			return
		}
		select {
		case closed <- struct{}{}:
		default:
		}
	}
}

// listenDestroys opens a netlink socket that receives the destroy broadcast of TCP
// sockets without a peer port, non-blocking so that its reads wait in the runtime's
// poller rather than in a thread. Joining the groups needs no privilege.
func (s *Scanner) listenDestroys() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("open netlink sock_diag socket: %w", err)
	}
	// The filter goes on first, so that no unfiltered message is ever queued.
	prog := unix.SockFprog{Len: uint16(len(destroyFilter)), Filter: &destroyFilter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("filter sock_diag destroy events: %w", err)
	}
	// Bound, the socket has a port id of its own: an unbound one has 0, the sender's,
	// and a broadcast skips its sender.
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind netlink sock_diag socket: %w", err)
	}
	for _, group := range [...]int{sknlgrpInetTCPDestroy, sknlgrpInet6TCPDestroy} {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, group); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("join sock_diag destroy group %d: %w", group, err)
		}
	}
	return os.NewFile(uintptr(fd), "sock_diag destroy events"), nil
}
