package peers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Notifier reports the records that may have changed, from inotify on the
// records directory, so that a reader need neither poll nor block a thread
// per running peer:
//
//   - a record renamed into place (IN_MOVED_TO): a final record, or a new
//     run, written with or without a poke;
//   - a record closed by a process that had it open for writing
//     (IN_CLOSE_WRITE): the locked file of a running record, closed when its
//     exec ends or dies, which releases the lock. Readers open records
//     read-only, so their own reads raise no such event.
//
// The inotify descriptor is non-blocking, so Next waits in Go's poller and
// holds no OS thread, whatever the number of running peers.
//
// A close that has to remove the watch itself waits for an SRCU grace
// period of the kernel's fsnotify (8 to 16 ms measured on a 2-core VM, over
// 100 ms under load), and a process exits only once every close has
// returned: the supervisor's exit would wait for it. Removed by Unwatch a
// millisecond or more before, the watch is destroyed by the kernel's own
// background work, and the close takes about 0.1 ms; Close removes it
// first too, which spares the wait about half the time.
type Notifier struct {
	f         *os.File
	wd        int
	unwatched atomic.Bool
	buf       []byte
	off, n    int
}

// Notify starts watching the records directory. It fails where inotify is
// not available, or the uid's limit of instances is reached; a reader then
// has only its rescans.
func (d Dir) Notify() (*Notifier, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	const mask = unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_ONLYDIR
	wd := -1
	err = d.at(".", func(dirfd int, rel string) error {
		if dirfd != unix.AT_FDCWD {
			// The held directory, by its descriptor: the path may name
			// another by now. Without /proc, the path it is.
			var err error
			if wd, err = unix.InotifyAddWatch(fd, "/proc/self/fd/"+strconv.Itoa(dirfd), mask); err == nil {
				return nil
			}
		}
		var err error
		wd, err = unix.InotifyAddWatch(fd, d.path, mask|unix.IN_DONT_FOLLOW)
		return err
	})
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify %s: %w", d.path, err)
	}
	return &Notifier{f: os.NewFile(uintptr(fd), "inotify:"+d.path), wd: wd, buf: make([]byte, 4<<10)}, nil
}

// ErrOverflow means events were lost (the kernel's queue overflowed): the
// reader must read every record again.
var ErrOverflow = errors.New("inotify queue overflowed")

// ErrUnwatched is what Next returns once Unwatch has removed the watch.
var ErrUnwatched = errors.New("the records directory is no longer watched: Unwatch")

// Next blocks until a record may have changed and returns its name. Names
// that cannot be records (dotfiles: temp files, claims, the posted store)
// are skipped. It returns ErrOverflow when events were lost, and another
// error once the Notifier is closed.
func (n *Notifier) Next() (string, error) {
	for {
		for n.off+unix.SizeofInotifyEvent <= n.n {
			ev := n.buf[n.off:]
			mask := binary.NativeEndian.Uint32(ev[4:8])
			size := int(binary.NativeEndian.Uint32(ev[12:16]))
			end := n.off + unix.SizeofInotifyEvent + size
			if end > n.n {
				break
			}
			name := strings.TrimRight(string(ev[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+size]), "\x00")
			n.off = end
			switch {
			case mask&unix.IN_Q_OVERFLOW != 0:
				return "", ErrOverflow
			case mask&unix.IN_IGNORED != 0 && n.unwatched.Load():
				return "", ErrUnwatched
			case mask&unix.IN_IGNORED != 0:
				return "", errors.New("the records directory is no longer watched (removed or unmounted)")
			case name == "" || strings.HasPrefix(name, "."):
				continue
			}
			return name, nil
		}
		k, err := n.f.Read(n.buf)
		if err != nil {
			return "", fmt.Errorf("inotify: %w", err)
		}
		n.off, n.n = 0, k
	}
}

// Unwatch removes the watch, so that no event comes any more and a later
// Close is quick; a Next under way returns ErrUnwatched. It may be called
// more than once, and before Close. A supervisor calls it as soon as it no
// longer needs the events, so that the kernel's destruction of the watch is
// over before it exits.
func (n *Notifier) Unwatch() error {
	if !n.unwatched.CompareAndSwap(false, true) {
		return nil
	}
	err := control(n.f, func(fd int) error {
		_, err := unix.InotifyRmWatch(fd, uint32(n.wd))
		return err
	})
	if err != nil {
		return fmt.Errorf("inotify: remove the watch: %w", err)
	}
	return nil
}

// Close stops watching, removing the watch first (see Notifier); a Next
// under way returns an error. A second Close only returns os.ErrClosed.
func (n *Notifier) Close() error {
	n.Unwatch()
	return n.f.Close()
}
