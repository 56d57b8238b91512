package peers

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

const (
	// dirMode lets every uid add its own record, and the sticky bit lets
	// only a record's owner replace or remove it.
	dirMode = 0o1777
	// recordMode lets the supervisor, often another uid, read and lock a
	// peer's record.
	recordMode = 0o644
	// controlMode lets peers of any uid reach control.sock and peers/ in a
	// control dir that we had to create ourselves.
	controlMode = 0o755
	// privateMode is for what only the supervisor writes.
	privateMode = 0o755
	// tempPrefix makes temp files dotfiles, which Load skips. A valid name
	// never starts with a dot, so a temp file never collides with a record.
	tempPrefix = ".tmp-"
	// loadTries bounds how often Load reads a record that keeps being
	// replaced under it. Each retry means a real Finish happened.
	loadTries = 8
)

// Dir is <control-dir>/peers, the directory of records.
//
// A Dir either names the directory by its path (Open: every call looks the
// path up again) or holds it open (CreateHeld, Hold): every call then goes
// through the descriptor of the directory that was created or checked,
// with *at calls, as the control socket's directory does. The control dir
// is an emptyDir, writable by every uid and, under Istio, not sticky, so
// any uid can rename peers/ away and make its own in its place; a held Dir
// goes on reading and writing the one it checked, and Replaced says when
// the path no longer names it. Copies of a held Dir share its descriptor,
// which Close releases.
type Dir struct {
	path string
	f    *os.File // the directory held open; nil: by path
}

// Open names the records directory of controlDir. It touches nothing.
func Open(controlDir string) Dir {
	return Dir{path: filepath.Join(controlDir, "peers")}
}

// Path is the directory's path.
func (d Dir) Path() string { return d.path }

func (d Dir) file(name string) string { return filepath.Join(d.path, name) }

// Close releases a held directory. Calls under way finish first (the
// descriptor is closed once the last lets go of it), and later ones fail;
// a second Close, or one of a Dir that holds nothing, is harmless.
func (d Dir) Close() error {
	if d.f == nil {
		return nil
	}
	if err := d.f.Close(); !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// at runs fn with a directory descriptor and name's path relative to it:
// the held directory's descriptor and name, or AT_FDCWD and the whole path.
func (d Dir) at(name string, fn func(dirfd int, rel string) error) error {
	if d.f == nil {
		return fn(unix.AT_FDCWD, d.file(name))
	}
	return control(d.f, func(fd int) error { return fn(fd, name) })
}

// openFile opens name in the directory, close-on-exec, as os.OpenFile
// would open its path; "." is the directory itself, with an offset of its
// own.
func (d Dir) openFile(name string, flags int, mode uint32) (*os.File, error) {
	fd := -1
	err := d.at(name, func(dirfd int, rel string) error {
		for {
			var err error
			fd, err = unix.Openat(dirfd, rel, flags|unix.O_CLOEXEC, mode)
			if !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.file(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.file(name)), nil
}

// lstat describes name in the directory without following a symlink.
func (d Dir) lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := d.at(name, func(dirfd int, rel string) error {
		return unix.Fstatat(dirfd, rel, &st, unix.AT_SYMLINK_NOFOLLOW)
	})
	return st, err
}

// rename renames from over to, both in the directory.
func (d Dir) rename(from, to string) error {
	err := d.at(from, func(dirfd int, rel string) error {
		return unix.Renameat(dirfd, rel, dirfd, filepath.Join(filepath.Dir(rel), to))
	})
	if err != nil {
		return &os.LinkError{Op: "rename", Old: d.file(from), New: d.file(to), Err: err}
	}
	return nil
}

// remove removes the file name from the directory.
func (d Dir) remove(name string) error {
	return d.at(name, func(dirfd int, rel string) error { return unix.Unlinkat(dirfd, rel, 0) })
}

func fstat(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := control(f, func(fd int) error { return unix.Fstat(fd, &st) })
	return st, err
}
