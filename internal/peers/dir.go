package peers

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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

// Remove removes name's record, durably; a record already gone is no error.
func (d Dir) Remove(name string) error {
	if err := d.remove(name); err != nil && !errors.Is(err, unix.ENOENT) {
		return &fs.PathError{Op: "remove", Path: d.file(name), Err: err}
	}
	return d.sync()
}

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

// Load reads every record, keyed by name. A running record whose lock
// nobody holds is reported final, as Lost with LostCode and the time of
// this Load (its exec died with its app, and when is unknown). Dotfiles are
// skipped in silence. Any other file that is not a valid record of at most
// 64 KiB named after its file, or whose owner is not in allowedUIDs (empty
// means all are allowed), is skipped with one error naming it. Errors are
// never fatal: the map holds every record that could be read.
func (d Dir) Load(allowedUIDs []uint32) (map[string]Record, []error) {
	recs, errs, _ := d.LoadUpTo(allowedUIDs, 0)
	return recs, errs
}

// loadChunk is how many directory entries LoadUpTo asks for at a time.
const loadChunk = 256

// LoadUpTo is Load that examines at most limit directory entries (0: no
// limit), in directory order, with one error saying that it stopped;
// complete says that it read the whole listing. Every
// entry counts, whether it loads or is skipped (a dotfile, a symlink, a
// record of a uid that is not allowed): peers/ is writable by every uid in
// the pod, so the cost of a read must not grow with what another container
// planted, whatever it planted. Entries that cannot be records by their
// type are skipped without being opened.
func (d Dir) LoadUpTo(allowedUIDs []uint32, limit int) (recs map[string]Record, errs []error, complete bool) {
	recs = map[string]Record{}
	f, err := d.openFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return recs, []error{fmt.Errorf("load records: %w", err)}, false
	}
	defer f.Close()
	seen := 0
	for {
		ents, err := f.ReadDir(loadChunk)
		for _, e := range ents {
			if limit > 0 && seen >= limit {
				errs = append(errs, fmt.Errorf("load records: more than %d entries in %s; the rest are not read", limit, d.path))
				return recs, errs, false
			}
			seen++
			name := e.Name()
			switch t := e.Type(); {
			case strings.HasPrefix(name, "."):
			case t&fs.ModeSymlink != 0:
				errs = append(errs, fmt.Errorf("skip %s: a symlink, not a record", d.file(name)))
			case t&fs.ModeType != 0:
				errs = append(errs, fmt.Errorf("skip %s: not a regular file", d.file(name)))
			default:
				errs = d.load(recs, errs, name, allowedUIDs)
			}
		}
		if errors.Is(err, io.EOF) {
			return recs, errs, true
		}
		if err != nil {
			return recs, append(errs, fmt.Errorf("load records: %w", err)), false
		}
	}
}

// LoadNames reads the records of the given names only, as Load would read
// them: the cost does not depend on what else is in the directory.
func (d Dir) LoadNames(names []string, allowedUIDs []uint32) (map[string]Record, []error) {
	recs := map[string]Record{}
	var errs []error
	for _, name := range names {
		errs = d.load(recs, errs, name, allowedUIDs)
	}
	return recs, errs
}

// load reads one record into recs, or adds why it cannot to errs.
func (d Dir) load(recs map[string]Record, errs []error, name string, allowedUIDs []uint32) []error {
	r, ok, err := d.Get(name, allowedUIDs)
	if err != nil {
		return append(errs, fmt.Errorf("skip %s: %w", d.file(name), err))
	}
	if ok {
		recs[name] = r
	}
	return errs
}

// Get reads one record, as Load does, again while a Finish keeps replacing
// it. ok is false when there is no record, which is not an error.
func (d Dir) Get(name string, allowed []uint32) (r Record, ok bool, err error) {
	if err := ValidName(name); err != nil {
		return Record{}, false, err
	}
	for range loadTries {
		r, stable, err := d.read(name, allowed)
		if errors.Is(err, fs.ErrNotExist) {
			return Record{}, false, nil
		}
		if err != nil {
			return Record{}, false, err
		}
		if stable {
			return r, true, nil
		}
	}
	return Record{}, false, fmt.Errorf("replaced %d times while being read", loadTries)
}

// read reads the record at <name> once. stable is false when the record was
// running and unlocked but the path no longer names the inode we locked: a
// Finish renamed a final record over it, and the caller must read again.
func (d Dir) read(name string, allowed []uint32) (r Record, stable bool, err error) {
	// O_NOFOLLOW: a planted symlink must not make us read another file.
	// O_NONBLOCK: a planted FIFO must not hang the open.
	f, err := d.openFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return Record{}, false, errors.New("a symlink, not a record")
		}
		return Record{}, false, err
	}
	defer f.Close()
	st, err := fstat(f)
	if err != nil {
		return Record{}, false, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return Record{}, false, errors.New("not a regular file")
	case len(allowed) > 0 && !slices.Contains(allowed, st.Uid):
		return Record{}, false, fmt.Errorf("owner uid %d is not allowed", st.Uid)
	case st.Size > maxRecordSize:
		return Record{}, false, fmt.Errorf("%d bytes, larger than a record can be (%d)", st.Size, maxRecordSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return Record{}, false, err
	}
	if len(b) > maxRecordSize {
		return Record{}, false, fmt.Errorf("grew larger than a record can be (%d)", maxRecordSize)
	}
	r, err = decode(b)
	if err != nil {
		return Record{}, false, err
	}
	// A record that names another peer is a forgery or a misplaced copy;
	// either way it must not count for the file's name.
	if r.Name != name {
		return Record{}, false, fmt.Errorf("holds the record of %s", quote(r.Name))
	}
	r.UID = st.Uid
	if r.Final() {
		return r, true, nil
	}
	held, err := locked(f)
	if err != nil {
		return Record{}, false, err
	}
	if held {
		return r, true, nil
	}
	same, err := d.names(name, &st)
	if err != nil || !same {
		return Record{}, false, err
	}
	// The loss is dated from the run's start: when the peer died is unknown,
	// and a date that moved with every read would make each rescan look
	// like a new loss, and sort it after completions that came later.
	return Record{Name: name, ExitCode: LostCode, Reason: Lost, Time: r.Time, Started: r.Started, UID: st.Uid}, true, nil
}

// names reports whether name still names the inode st describes.
func (d Dir) names(name string, st *unix.Stat_t) (bool, error) {
	now, err := d.lstat(name)
	if err != nil {
		return false, err
	}
	return now.Dev == st.Dev && now.Ino == st.Ino, nil
}

func fstat(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := control(f, func(fd int) error { return unix.Fstat(fd, &st) })
	return st, err
}
