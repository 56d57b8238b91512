package peers

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Reading records, and telling from a running record's lock whether its
// exec still lives.

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
