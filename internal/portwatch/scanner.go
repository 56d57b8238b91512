package portwatch

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Scanner lists listening TCP sockets (IPv4 and IPv6) via netlink sock_diag with a
// LISTEN-only state filter; where netlink is refused it falls back to /proc/net/tcp{,6}
// and logs that once.
type Scanner struct {
	log  *slog.Logger
	dial func() (diagConn, error)

	mu  sync.Mutex // serialises scans, which share buf
	buf []byte

	fallback atomic.Bool
}

// NewScanner returns a Scanner that logs to log; a nil log discards.
func NewScanner(log *slog.Logger) *Scanner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scanner{log: log, dial: dialNetlink}
}

// Listening returns the listening TCP sockets of the current network namespace, IPv4
// before IPv6. It opens a netlink socket for the one scan; an OpenScanner keeps one.
func (s *Scanner) Listening() ([]Socket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c diagConn
	socks, err := s.listening(&c, nil)
	if c != nil {
		c.close()
	}
	return socks, err
}

// Fallback reports whether the Scanner has fallen back to /proc/net/tcp{,6}.
func (s *Scanner) Fallback() bool { return s.fallback.Load() }

// listening scans through *c, dialing it first when it is nil, and appends to dst[:0].
// The caller holds mu.
func (s *Scanner) listening(c *diagConn, dst []Socket) ([]Socket, error) {
	if s.fallback.Load() {
		return ScanProc()
	}
	socks, err := s.scanNetlink(c, dst[:0])
	if err == nil {
		return socks, nil
	}
	if !refused(err) {
		return nil, err
	}
	// A refusal comes from policy or the kernel and will not go away, so netlink is
	// not tried again and this is logged only here.
	s.fallback.Store(true)
	s.log.Warn("netlink sock_diag refused; listing listeners from /proc/net/tcp instead, which costs more with many connections", "err", err)
	return ScanProc()
}

// scanNetlink dumps both families through *c. A dump that failed may have left
// datagrams queued that the next one would take for its own, so after a failure *c is
// closed and set to nil, and the next scan dials afresh.
func (s *Scanner) scanNetlink(c *diagConn, socks []Socket) ([]Socket, error) {
	if *c == nil {
		conn, err := s.dial()
		if err != nil {
			return nil, err
		}
		*c = conn
	}
	if s.buf == nil {
		s.buf = make([]byte, recvBufSize)
	}
	for _, family := range [...]uint8{unix.AF_INET, unix.AF_INET6} {
		// IPv4-mapped and dual-stack [::] listeners are IPv6 sockets and appear only
		// in the AF_INET6 dump.
		var err error
		socks, err = dumpFamily(*c, s.buf, family, socks)
		if err != nil {
			(*c).close()
			*c = nil
			return nil, fmt.Errorf("list %s listeners: %w", familyName(family), err)
		}
	}
	return socks, nil
}

func familyName(family uint8) string {
	if family == unix.AF_INET6 {
		return "IPv6"
	}
	return "IPv4"
}
