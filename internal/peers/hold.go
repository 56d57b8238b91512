package peers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Whose the records directory is: the control dir is writable by every uid,
// so a directory is used only once it is checked to be the supervisor's,
// and held, so that a rename of its path cannot swap it for another.

// Hold opens the directory for a client and returns it held, once a uid
// that trusted accepts owns it: the supervisor creates it and must own it
// (or root, or this uid). Where the control dir is not sticky (Istio's
// emptyDir), any uid can rename the supervisor's peers/ away and make its
// own; a client that wrote there by path would report where no supervisor
// reads, and its running record would not hold a drain. A directory of
// another uid is an *UntrustedDirError; one that does not exist yet is the
// open's error (fs.ErrNotExist), for the caller to wait for it.
func (d Dir) Hold(trusted func(uid uint32) bool) (Dir, error) {
	f, err := os.OpenFile(d.path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		// The supervisor refuses a peers/ that is a symlink or a file at
		// start: one there now was planted, and must not hold the app up.
		var st unix.Stat_t
		if (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) && unix.Lstat(d.path, &st) == nil {
			return Dir{}, &UntrustedDirError{Path: d.path, UID: st.Uid, NotDir: true}
		}
		return Dir{}, err
	}
	st, err := fstat(f)
	switch {
	case err != nil:
	case !trusted(st.Uid):
		err = &UntrustedDirError{Path: d.path, UID: st.Uid}
	}
	if err != nil {
		f.Close()
		return Dir{}, err
	}
	return Dir{path: d.path, f: f}, nil
}

// UntrustedDirError is a records directory that a uid not trusted to be
// the supervisor's owns: most likely another uid renamed the supervisor's
// away and made its own in its place.
type UntrustedDirError struct {
	Path   string
	UID    uint32
	NotDir bool // a symlink or a file of UID's, which the supervisor never makes
}

func (e *UntrustedDirError) Error() string {
	if e.NotDir {
		return fmt.Sprintf("%s is not a directory but a symlink or a file of uid %d, which the supervisor never makes; no record is written there", e.Path, e.UID)
	}
	return fmt.Sprintf("%s belongs to uid %d, which is not trusted to be the supervisor (another uid may have renamed the supervisor's away and made its own there); no record is written in it", e.Path, e.UID)
}

// Replaced reports, for a held directory, that its path no longer names
// it: another uid renamed it away or removed it, and may have made its own
// in its place. The held one is still read and written, but a client that
// looks the path up now writes elsewhere, where the supervisor does not
// look. nil for a Dir that holds nothing, or while the path names it.
func (d Dir) Replaced() error {
	if d.f == nil {
		return nil
	}
	held, err := fstat(d.f)
	if err != nil {
		return fmt.Errorf("%s: %w", d.path, err)
	}
	var now unix.Stat_t
	switch err := unix.Lstat(d.path, &now); {
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s was renamed away or removed: the records are still read from the directory created at start, but a client that starts now cannot reach it", d.path)
	case err != nil:
		return fmt.Errorf("%s: %w", d.path, err)
	case now.Dev != held.Dev || now.Ino != held.Ino:
		return fmt.Errorf("%s was replaced by another directory (owned by uid %d): the records are still read from the one created at start, but a client that starts now may write into the other, which is not read", d.path, now.Uid)
	}
	return nil
}

// Create makes the directory, and the control dir if it is missing, for the
// supervisor. Modes are set with chmod, because the umask must not decide
// who can report. An existing directory gets its mode fixed, but it must be
// a real directory owned by us: a peer that planted a symlink or its own
// directory there could otherwise redirect the chmod or delete any record.
func (d Dir) Create() error {
	h, err := d.CreateHeld()
	if err != nil {
		return err
	}
	return h.Close()
}

// CreateHeld is Create that returns the directory it created and checked
// held open: the supervisor's, which must go on reading the directory it
// checked whatever another uid renames in the control dir.
func (d Dir) CreateHeld() (Dir, error) {
	parent := filepath.Dir(d.path)
	if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(parent, controlMode); err != nil {
			return Dir{}, fmt.Errorf("create control dir: %w", err)
		}
		if err := os.Chmod(parent, controlMode); err != nil {
			return Dir{}, fmt.Errorf("create control dir: %w", err)
		}
	} else if err != nil {
		return Dir{}, fmt.Errorf("create control dir: %w", err)
	}
	return Dir{path: parent}.createIn(filepath.Base(d.path), dirMode)
}

// CreatePosted makes, in a held records directory, the directory where the
// supervisor keeps completions that came by POST alone, writable by its
// owner alone, with the same checks as Create, and returns it held. It is
// apart from the peers' records because peers/ is sticky: a record the
// supervisor wrote there could never be replaced by the peer's next run.
// Load of the peers' directory skips it (a dotfile).
func (d Dir) CreatePosted() (Dir, error) { return d.createIn(".posted", privateMode) }

// CreateSuperseded makes, in a held records directory, the directory where
// the supervisor keeps, as copies, the records that an earlier run of the
// pod left (before a RestartAllContainers), with the same checks as
// CreatePosted, and returns it held: a record of a name dated at or before
// its copy's time there counts as none.
func (d Dir) CreateSuperseded() (Dir, error) { return d.createIn(".superseded", privateMode) }

// CreateRestarting makes, in a held records directory, the directory where
// the supervisor keeps the record whose exit makes the kubelet restart
// every container of the pod, from the moment it sees it until its
// successor, in the pod's next run, has superseded the run's records (the
// app's next run marks its record running again, maybe before that
// successor reads it), with the same checks as CreatePosted, and returns it
// held.
func (d Dir) CreateRestarting() (Dir, error) { return d.createIn(".restarting", privateMode) }

// createIn makes the directory name in d with mode, or fixes the mode of
// the one there, and returns it held. It must be a real directory that
// this uid owns: a peer that planted a symlink or a directory of its own
// there is refused, never followed.
func (d Dir) createIn(name string, mode uint32) (Dir, error) {
	path := d.file(name)
	err := d.at(name, func(dirfd int, rel string) error { return unix.Mkdirat(dirfd, rel, mode) })
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return Dir{}, fmt.Errorf("create %s: %w", path, err)
	}
	// Checked and chmodded through a descriptor opened without following
	// a symlink, which is then kept: the directory checked is the one
	// used.
	f, err := d.openFile(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return Dir{}, fmt.Errorf("create %s: exists and is not a directory", path)
		}
		return Dir{}, fmt.Errorf("create %s: %w", path, err)
	}
	h := Dir{path: path, f: f}
	st, err := fstat(f)
	switch {
	case err != nil:
	case st.Uid != uint32(os.Geteuid()):
		err = fmt.Errorf("owned by uid %d, not by us (uid %d); its owner could remove any record", st.Uid, os.Geteuid())
	default:
		err = control(f, func(fd int) error { return unix.Fchmod(fd, mode) })
	}
	if err != nil {
		h.Close()
		return Dir{}, fmt.Errorf("create %s: %w", path, err)
	}
	return h, nil
}
