package peers

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Writing a record: a temp file renamed over its name, so that a reader
// never sees half of one.

// Write stores a final record atomically and durably. A zero Time becomes
// now. In the sticky directory, replacing a record owned by another uid
// fails with a permission error.
func (d Dir) Write(r Record) error {
	if r.Running {
		return fmt.Errorf("record %s: Write stores final records; Begin marks one running", r.Name)
	}
	_, err := d.put(r, false)
	return err
}

// put writes r to a temp file and renames it over <name>. With lock, the
// temp file is locked LOCK_EX before it is written and returned open, so
// the record is never visible unlocked.
//
// A final record is renamed into place, then fsynced, then its directory,
// and put returns (and a completion is reported over the socket) only once
// both are on disk: a reported completion survives a crash of the node.
// Renamed before the fsyncs rather than between them, the record reaches
// the supervisor (inotify) before any fsync, and on a journaling filesystem
// (ext4, XFS, btrfs) the file's fsync commits the rename with it, which
// leaves the directory's fsync next to nothing to do: one journal commit
// per record instead of two. What it gives up concerns only a write that
// never returned: a crash in it may leave the name empty where the
// filesystem does not write a renamed file's data before the rename (ext4
// does, by default, for a rename over an existing file), and an empty file
// reads as no record. What the name held then was exec's running record of
// this run, or an earlier run's record that decides nothing for this one
// (see below).
//
// A running record (lock) is not fsynced at all, which leaves exec with the
// two fsyncs of its final record: it only has to be visible, and locked,
// while exec lives, and a crash ends exec and its lock with it. What a
// crash can then bring back is the record that the running one replaced,
// a final record of an earlier run of the same name, and that record never
// decides for the later run: a name runs again only after a failure under
// OnFailure (the kubelet does not restart a container that succeeded),
// which leaves the peer pending, or under Always or as a native sidecar,
// where no exit stops the proxy. The run's final record is written
// durably, and makes the running record's rename durable with it.
func (d Dir) put(r Record, lock bool) (_ *os.File, err error) {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	r = r.normal()
	if err := r.Validate(); err != nil {
		return nil, err
	}
	b, err := encode(r)
	if err != nil {
		return nil, err
	}
	f, tmp, err := d.createTemp(tempPrefix + r.Name + ".")
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", r.Name, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			d.remove(tmp) // gone already if the rename happened
		}
	}()
	if lock {
		// Nobody else knows this inode yet, so this cannot block.
		if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return nil, fmt.Errorf("record %s: lock: %w", r.Name, err)
		}
	}
	if err := f.Chmod(recordMode); err != nil {
		return nil, fmt.Errorf("record %s: %w", r.Name, err)
	}
	if _, err := f.Write(b); err != nil {
		return nil, fmt.Errorf("record %s: %w", r.Name, err)
	}
	if err := d.rename(tmp, r.Name); err != nil {
		if t := d.takenBy(r.Name, r.Name, err); t != nil && errors.Is(err, fs.ErrPermission) {
			return nil, t
		}
		return nil, fmt.Errorf("record %s: %w", r.Name, err)
	}
	if lock {
		return f, nil
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("record %s: %w", r.Name, err)
	}
	if err := d.sync(); err != nil {
		return nil, fmt.Errorf("record %s: %w", r.Name, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("record %s: %w", r.Name, err)
	}
	return nil, nil
}

// Remove removes name's record, durably; a record already gone is no error.
func (d Dir) Remove(name string) error {
	if err := d.remove(name); err != nil && !errors.Is(err, unix.ENOENT) {
		return &fs.PathError{Op: "remove", Path: d.file(name), Err: err}
	}
	return d.sync()
}

// sync makes a rename durable: the new name lives in the directory.
func (d Dir) sync() error {
	if d.f != nil {
		return d.f.Sync()
	}
	f, err := os.Open(d.path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// createTemp creates a new file in the directory, mode 0600, named prefix
// and a random suffix, as os.CreateTemp does, and returns it with its name.
// Random, not counted: peers/ is writable by every uid, and names another
// uid can guess it can take first.
func (d Dir) createTemp(prefix string) (*os.File, string, error) {
	for range 10 {
		name := prefix + strconv.FormatUint(rand.Uint64(), 36)
		f, err := d.openFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, name, err
	}
	return nil, "", fmt.Errorf("create a temp file in %s: every name tried exists", d.path)
}
