package http1

import (
	"errors"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// accept returns ln's next connection. While the process is out of
// descriptors or memory, it waits for connections that end to give some
// back (5 ms, doubling up to 1 s), telling retry each time, rather than spin
// or stop serving. Other errors are returned, net.ErrClosed once ln is
// closed.
func accept(ln net.Listener, retry func(err error, wait time.Duration)) (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err == nil || !transient(err) {
			return c, err
		}
		backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
		if retry != nil {
			retry(err, backoff)
		}
		time.Sleep(backoff)
	}
}

// transient reports whether an accept failed for want of a resource that
// connections ending give back.
func transient(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) ||
		errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM)
}
