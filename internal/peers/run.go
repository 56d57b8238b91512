package peers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Run is exec's hold on its running record. The lock lives in an open
// file, so keep the Run reachable until Finish or Abort: a collected file
// is closed, and its lock dropped, by its finalizer. The file is
// close-on-exec, so COMMAND does not inherit the lock and it measures
// exec's own life.
type Run struct {
	mu   sync.Mutex
	dir  Dir
	name string
	f    *os.File // nil once the run has ended
}

// Begin marks <name> running and holds an exclusive flock on that record
// until Finish, Abort or the death of this process. It replaces any final
// record of an earlier run. It refuses a name whose record another live
// exec holds, since two containers need two names.
func (d Dir) Begin(name string) (*Run, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if held, err := d.held(name); err != nil {
		return nil, fmt.Errorf("record %s: %w", name, err)
	} else if held {
		return nil, fmt.Errorf("record %s: another exec holds it; each container needs its own name", name)
	}
	f, err := d.put(Record{Name: name, Running: true}, true)
	if err != nil {
		return nil, err
	}
	return &Run{dir: d, name: name, f: f}, nil
}

// held reports whether a live exec holds the record <name>. It probes with a
// shared lock, which conflicts only with exec's exclusive one, not with a
// concurrent Load or WatchLost.
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
// bad code or reason is refused and the run goes on. Once the write was
// tried the lock is released even if it failed: the record then reads as
// Lost, which is the truth, since the outcome could not be recorded.
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
	werr := r.dir.Write(rec)
	cerr := r.f.Close()
	r.f = nil
	if werr != nil {
		return fmt.Errorf("finish: %w", werr)
	}
	if cerr != nil {
		return fmt.Errorf("record %s: release lock: %w", r.name, cerr)
	}
	return nil
}

// Abort releases the lock without a final record, so the record reads as
// Lost, exactly as if the process holding it had been killed.
func (r *Run) Abort() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return fmt.Errorf("record %s: run already ended", r.name)
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return fmt.Errorf("record %s: release lock: %w", r.name, err)
	}
	return nil
}

// WatchLost blocks until the running record <name> has no lock holder, or
// ctx ends; the caller then calls Load again. Its exec has finished (and a
// final record is in place) or died (and Load reports it Lost). It returns
// nil at once when the record is already final or unlocked.
//
// The wait is a blocking flock(LOCK_SH) in a helper goroutine: the kernel
// wakes it the moment the holder's lock is released, with no polling. A
// blocked flock cannot be interrupted (closing the descriptor does not wake
// it, and Go's signal handlers restart it), so when ctx ends first
// WatchLost returns ctx.Err() and leaves the helper behind. The helper
// holds a goroutine, an OS thread and a descriptor until that exec ends,
// which it always does with its container; then it closes the descriptor
// and exits. Keep one watch per running peer rather than re-arming one on
// every poke, or the leftovers pile up.
func (d Dir) WatchLost(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidName(name); err != nil {
		return err
	}
	f, err := os.OpenFile(d.file(name), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("watch %s: %w", name, err)
	}
	held, err := locked(f)
	if err != nil || !held {
		f.Close()
		if err != nil {
			return fmt.Errorf("watch %s: %w", name, err)
		}
		return nil
	}
	// Only exec's lock on a running record is exclusive; a final record is
	// never locked, so a held lock means a running record.
	done := make(chan error, 1) // buffered: the helper may outlive us
	go func() {
		err := flock(f, unix.LOCK_SH)
		f.Close()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("watch %s: %w", name, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
