package http1

import (
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// scripted is a listener whose Accept returns errs in turn, then a
// connection, then net.ErrClosed.
type scripted struct {
	net.Listener
	errs []error
	conn net.Conn
}

func (l *scripted) Accept() (net.Conn, error) {
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	if c := l.conn; c != nil {
		l.conn = nil
		return c, nil
	}
	return nil, net.ErrClosed
}

// Out of descriptors, a server waits for some to be freed, growing its
// wait, and serves again; it neither spins nor stops.
func TestAcceptWaitsOutAShortage(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	emfile := &net.OpError{Op: "accept", Err: unix.EMFILE}
	l := &scripted{errs: []error{emfile, emfile, &net.OpError{Op: "accept", Err: unix.ENFILE}}, conn: c1}
	var waits []time.Duration
	c, err := accept(l, func(err error, wait time.Duration) { waits = append(waits, wait) })
	if err != nil || c != c1 {
		t.Fatalf("Accept = %v, %v; want the connection", c, err)
	}
	if want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}; !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	if _, err := accept(l, nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed listener: %v, want net.ErrClosed", err)
	}
	other := &net.OpError{Op: "accept", Err: unix.EINVAL}
	if _, err := accept(&scripted{errs: []error{other}}, nil); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("a lasting error: %v, want it returned", err)
	}
}
