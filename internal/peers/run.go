package peers

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

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
	f     *os.File    // nil once the run has ended
	claim *os.File    // the name's claim, released last; nil when unclaimed
	taken *TakenError // why the claim was not taken, if it was not
	// started is the container's start (ContainerStarted), in the running
	// record and the final one alike.
	started time.Time
}

// Begin claims <name>, marks it running and holds an exclusive flock on
// that record until Finish, Abort or the death of this process. It replaces
// any final record of an earlier run. It refuses a name that another live
// exec of this uid holds, since two containers need two names.
//
// A claim file that another uid owns does not stop it: that uid took the
// name first (a hostile container, or one of another uid given the same
// name), and waiting for it could hang the Job. Begin then marks the run
// without the claim, and Unclaimed says why. A record of the name that
// another uid owns is in the way of the running record; Begin then fails
// with a *TakenError, and exec goes on without a record.
//
// Both records carry the container's start (Record.Started).
func (d Dir) Begin(name string) (*Run, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	claim, err := d.claim(name)
	var taken *TakenError
	if errors.As(err, &taken) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	started := ContainerStarted()
	f, err := d.put(Record{Name: name, Running: true, Started: started}, true)
	if err != nil {
		if claim != nil {
			claim.Close()
		}
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	return &Run{dir: d, name: name, f: f, claim: claim, taken: taken, started: started}, nil
}

var errHeld = errors.New("another exec holds it; each container needs its own name")

// TakenError is a claim file or a record of a name that another uid owns:
// that uid took the name before this one.
type TakenError struct {
	Name, Path string
	UID        uint32 // the owner
	Err        error  // what it made fail, if anything did
}

func (e *TakenError) Unwrap() error { return e.Err }

func (e *TakenError) Error() string {
	return fmt.Sprintf("%s belongs to uid %d, not to this uid %d: another uid took the name %s (a hostile container, or one of another uid given the same name)",
		e.Path, e.UID, os.Geteuid(), e.Name)
}

// takenBy returns a *TakenError wrapping err when the file of the name
// entry exists and another uid owns it.
func (d Dir) takenBy(name, entry string, err error) *TakenError {
	st, serr := d.lstat(entry)
	if serr != nil || st.Uid == uint32(os.Geteuid()) {
		return nil
	}
	return &TakenError{Name: name, Path: d.file(entry), UID: st.Uid, Err: err}
}

// Unclaimed is why Begin ran without the name's claim (another uid owns
// the claim file), or nil when it holds the claim.
func (r *Run) Unclaimed() error {
	if r.taken == nil {
		return nil
	}
	return r.taken
}

// claimPrefix names each name's claim file, .claim.<name>: a dotfile, which
// Load skips, and one that is never renamed or removed, so that every exec
// of a name locks the same inode. (The record cannot serve: each write
// replaces its inode, so two execs could each lock a different one.)
const claimPrefix = ".claim."

// claimMode keeps other uids from opening a claim file, and so from
// locking it: only execs of the owner's uid contend for it.
const claimMode = 0o600

// claim takes <name> for as long as the returned file is open, by an
// exclusive flock on its claim file. It refuses at once, without waiting,
// when another exec has it, and returns a *TakenError when the claim file
// is another uid's.
func (d Dir) claim(name string) (*os.File, error) {
	f, err := d.openClaim(name, claimPrefix+name)
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

// openClaim opens the claim file entry, creating it if needed, mode
// claimMode. It never follows a symlink or opens anything but a regular
// file of this uid: anything else there is another uid's (a *TakenError),
// or an error. It creates only with O_EXCL: an O_CREAT open of another
// uid's file in a sticky directory fails under fs.protected_regular.
func (d Dir) openClaim(name, entry string) (*os.File, error) {
	const flags = os.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK
	path := d.file(entry)
	for range loadTries {
		f, err := d.openFile(entry, flags, 0)
		if errors.Is(err, os.ErrNotExist) {
			f, err = d.openFile(entry, flags|os.O_CREATE|os.O_EXCL, claimMode)
			if errors.Is(err, os.ErrExist) {
				continue // another exec made it first
			}
		}
		if err != nil {
			if t := d.takenBy(name, entry, err); t != nil {
				return nil, t
			}
			if errors.Is(err, unix.ELOOP) {
				return nil, fmt.Errorf("%s is a symlink, not a claim file", path)
			}
			return nil, err
		}
		st, err := fstat(f)
		switch {
		case err != nil:
		case st.Uid != uint32(os.Geteuid()):
			err = &TakenError{Name: name, Path: path, UID: st.Uid}
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			err = fmt.Errorf("%s is not a regular file", path)
		case st.Mode&0o777 != claimMode:
			// The umask, or an exec of old, may have left it open to others.
			err = f.Chmod(claimMode)
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s: created and removed %d times while being opened", path, loadTries)
}

// Finish writes the final record and then releases the lock, in that order,
// so that no reader sees the running record unlocked while exec lives. A
// bad code or reason is refused and the run goes on. So does a write that
// fails (a full or read-only volume): the lock is kept, so that the caller
// can report the end another way (over the socket) before it lets go with
// Abort; released first, the record would read as Lost.
func (r *Run) Finish(code int, reason Reason, stop Stop) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return fmt.Errorf("record %s: run already ended", r.name)
	}
	rec := Record{Name: r.name, ExitCode: code, Reason: reason, Stop: stop, Started: r.started}.normal()
	if err := rec.Validate(); err != nil {
		return err
	}
	if err := r.dir.Write(rec); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	err := r.release()
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
	err := r.release()
	if err != nil {
		return fmt.Errorf("record %s: release lock: %w", r.name, err)
	}
	return nil
}

// release closes the record's locked file, then the claim.
func (r *Run) release() error {
	err := r.f.Close()
	if r.claim != nil {
		err = errors.Join(err, r.claim.Close())
	}
	r.f = nil
	return err
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
