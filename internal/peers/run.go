package peers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Run is exec's hold on its running record. The lock lives in an open
// file, so keep the Run reachable until Finish or Abort: a collected file
// is closed, and its lock dropped, by its finalizer. The file is
// close-on-exec, so COMMAND does not inherit the lock and it measures
// exec's own life.
type Run struct {
	mu    sync.Mutex
	dir   Dir
	name  string
	f     *os.File // nil once the run has ended
	claim *os.File // the name's claim, released last
}

// Begin claims <name>, marks it running and holds an exclusive flock on
// that record until Finish, Abort or the death of this process. It replaces
// any final record of an earlier run. It refuses a name that another live
// exec holds, since two containers need two names.
func (d Dir) Begin(name string) (*Run, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	claim, err := d.claim(name)
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	// An exec that predates claims may hold the record without a claim.
	held, err := d.held(name)
	if err == nil && held {
		err = errHeld
	}
	var f *os.File
	if err == nil {
		f, err = d.put(Record{Name: name, Running: true}, true)
	}
	if err != nil {
		claim.Close()
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	return &Run{dir: d, name: name, f: f, claim: claim}, nil
}

var errHeld = errors.New("another exec holds it; each container needs its own name")

// claimPrefix names each name's claim file, .claim.<name>: a dotfile, which
// Load skips, and one that is never renamed or removed, so that every exec
// of a name locks the same inode. (The record cannot serve: each write
// replaces its inode, so two execs could each lock a different one.)
const claimPrefix = ".claim."

// claim takes <name> for as long as the returned file is open, by an
// exclusive flock on its claim file. It refuses at once, without waiting,
// when another exec has it.
func (d Dir) claim(name string) (*os.File, error) {
	f, err := d.openClaim(filepath.Join(d.path, claimPrefix+name))
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	err = flock(f, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		err = errHeld
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openClaim opens the claim file at path, creating it if needed. It never
// follows a symlink or opens anything but a regular file. It opens for
// reading, which is all a lock needs, so that a claim file another uid made
// can still be locked (and the record's owner then decides, by the sticky
// bit). It creates only with O_EXCL: an O_CREAT open of another uid's file
// in a sticky directory fails under fs.protected_regular.
func (d Dir) openClaim(path string) (*os.File, error) {
	const flags = os.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK
	for range loadTries {
		f, err := os.OpenFile(path, flags, 0)
		if errors.Is(err, os.ErrNotExist) {
			f, err = os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL, recordMode)
			if errors.Is(err, os.ErrExist) {
				continue // another exec made it first
			}
			if err == nil {
				err = f.Chmod(recordMode) // the umask must not lock other uids out
			}
		}
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink, not a claim file", path)
		}
		if err != nil {
			return nil, err
		}
		st, err := fstat(f)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			err = fmt.Errorf("%s is not a regular file", path)
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s: created and removed %d times while being opened", path, loadTries)
}

// held reports whether a live exec holds the record <name>. It probes with a
// shared lock, which conflicts only with exec's exclusive one, not with a
// concurrent Load.
func (d Dir) held(name string) (bool, error) {
	f, err := os.OpenFile(d.file(name), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	return locked(f)
}

// Name is the peer's name.
func (r *Run) Name() string { return r.name }

// Finish writes the final record and then releases the lock, in that order,
// so that no reader sees the running record unlocked while exec lives. A
// bad code or reason is refused and the run goes on. So does a write that
// fails (a full or read-only volume): the lock is kept, so that the caller
// can report the end another way (over the socket) before it lets go with
// Abort; released first, the record would read as Lost.
func (r *Run) Finish(code int, reason Reason) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return fmt.Errorf("record %s: run already ended", r.name)
	}
	rec := Record{Name: r.name, ExitCode: code, Reason: reason}.normal()
	if err := rec.Validate(); err != nil {
		return err
	}
	if err := r.dir.Write(rec); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	err := errors.Join(r.f.Close(), r.claim.Close())
	r.f = nil
	if err != nil {
		return fmt.Errorf("record %s: release lock: %w", r.name, err)
	}
	return nil
}

// Abort releases the lock without writing a final record. Unless the end
// was recorded or reported some other way, the record then reads as Lost,
// exactly as if the process holding it had been killed.
func (r *Run) Abort() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return fmt.Errorf("record %s: run already ended", r.name)
	}
	err := errors.Join(r.f.Close(), r.claim.Close())
	r.f = nil
	if err != nil {
		return fmt.Errorf("record %s: release lock: %w", r.name, err)
	}
	return nil
}

// locked probes f's lock without blocking. It reports true when another
// open file holds it exclusively. When it returns false, f holds a shared
// lock until it is closed.
func locked(f *os.File) (bool, error) {
	err := flock(f, unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("probe lock: %w", err)
	}
	return false, nil
}

// flock locks f, retrying when a signal interrupts the call.
func flock(f *os.File, how int) error {
	return control(f, func(fd int) error {
		for {
			err := unix.Flock(fd, how)
			if !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	})
}

// control runs fn on f's descriptor without taking it out of Go's hands,
// as f.Fd() would.
func control(f *os.File, fn func(fd int) error) error {
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
