package peers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// newDir returns a created records directory in a fresh control dir.
func newDir(t *testing.T) Dir {
	t.Helper()
	d := Open(t.TempDir())
	if err := d.Create(); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCreateModesUnderUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	control := filepath.Join(t.TempDir(), "a", "control")
	d := Open(control)
	if err := d.Create(); err != nil {
		t.Fatal(err)
	}
	assertMode(t, control, 0o755)
	assertMode(t, d.Path(), 0o777|fs.ModeSticky)

	// An existing directory with the wrong mode is fixed.
	if err := os.Chmod(d.Path(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(); err != nil {
		t.Fatal(err)
	}
	assertMode(t, d.Path(), 0o777|fs.ModeSticky)

	// Records are readable by the supervisor's uid whatever the umask.
	if err := d.Write(Record{Name: "app"}); err != nil {
		t.Fatal(err)
	}
	assertMode(t, filepath.Join(d.Path(), "app"), 0o644)
	run, err := d.Begin("job")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Abort()
	assertMode(t, filepath.Join(d.Path(), "job"), 0o644)
}

func assertMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (fs.ModePerm | fs.ModeSticky); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

func TestCreateRefusesPlanted(t *testing.T) {
	t.Run("symlink", func(t *testing.T) {
		control := t.TempDir()
		target := t.TempDir()
		if err := os.Chmod(target, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(control, "peers")); err != nil {
			t.Fatal(err)
		}
		if err := Open(control).Create(); err == nil {
			t.Error("Create followed a symlink")
		}
		assertMode(t, target, 0o700) // untouched
	})
	t.Run("file", func(t *testing.T) {
		control := t.TempDir()
		if err := os.WriteFile(filepath.Join(control, "peers"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := Open(control).Create(); err == nil {
			t.Error("Create accepted a file")
		}
	})
	t.Run("foreign owner", func(t *testing.T) {
		skipUnlessRoot(t)
		control := t.TempDir()
		d := Open(control)
		if err := os.Mkdir(d.Path(), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d.Path(), 4242, 4242); err != nil {
			t.Fatal(err)
		}
		err := d.Create()
		if err == nil || !strings.Contains(err.Error(), "uid 4242") {
			t.Errorf("Create of a dir owned by another uid = %v, want a refusal", err)
		}
	})
}

func TestWriteLoad(t *testing.T) {
	d := newDir(t)
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	want := []Record{
		{Name: "app", ExitCode: 0, Reason: Exited, Time: at},
		{Name: "job", ExitCode: 3, Reason: Exited, Time: at},
		{Name: "killed", ExitCode: 143, Reason: Signaled, Time: at},
		{Name: "early", ExitCode: 69, Reason: NotReady, Time: at},
	}
	for _, r := range want {
		if err := d.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	recs, errs := d.Load(nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(recs) != len(want) {
		t.Fatalf("Load: %d records, want %d: %v", len(recs), len(want), recs)
	}
	for _, r := range want {
		r.UID = uint32(os.Geteuid())
		if got := recs[r.Name]; got != r {
			t.Errorf("Load[%s] = %+v, want %+v", r.Name, got, r)
		}
	}

	// A repeated report replaces the earlier one.
	if err := d.Write(Record{Name: "job", ExitCode: 0}); err != nil {
		t.Fatal(err)
	}
	recs, _ = d.Load(nil)
	if r := recs["job"]; !r.Succeeded() || r.Time.IsZero() {
		t.Errorf("after a second report, job = %+v, want a timed success", r)
	}
	if ents, _ := os.ReadDir(d.Path()); len(ents) != len(want) {
		t.Errorf("writes left %d files, want %d", len(ents), len(want))
	}
}

func TestWriteRefuses(t *testing.T) {
	d := newDir(t)
	for _, r := range []Record{
		{Name: "app", Running: true},
		{Name: "App"},
		{Name: "app", ExitCode: 256},
		{Name: "app", ExitCode: 9, Reason: Signaled},
		{Name: "app", Reason: Lost},
		{Name: "app", ExitCode: 1, Reason: "oom"},
	} {
		if err := d.Write(r); err == nil {
			t.Errorf("Write(%+v) succeeded", r)
		}
	}
	if ents, _ := os.ReadDir(d.Path()); len(ents) != 0 {
		t.Errorf("refused writes left files: %v", ents)
	}
	if err := Open(t.TempDir()).Write(Record{Name: "app"}); err == nil {
		t.Error("Write without a directory succeeded")
	}
}

func TestLoadSkipsJunk(t *testing.T) {
	d := newDir(t)
	if err := d.Write(Record{Name: "good"}); err != nil {
		t.Fatal(err)
	}
	put := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(d.Path(), name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Ignored in silence.
	put(".tmp-good.123", "half a rec")
	put(".hidden", "junk")
	// Skipped, each with an error that names the file.
	bad := []string{"junk", "empty", "big", "Bad_Name", "forged", "sub", "link", "fifo", "halfrunning"}
	put("junk", "not json\x00\xff")
	put("empty", "")
	put("big", `{"name":"big","exit_code":0,"pad":"`+strings.Repeat("x", maxRecordSize)+`"}`)
	put("Bad_Name", `{"name":"app","exit_code":0}`)
	put("forged", `{"name":"good","exit_code":1}`)
	put("halfrunning", `{"name":"halfrunning","running":true,"exit_code":`)
	if err := os.Mkdir(filepath.Join(d.Path(), "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d.Path(), "good"), filepath.Join(d.Path(), "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(d.Path(), "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	var recs map[string]Record
	var errs []error
	go func() {
		recs, errs = d.Load(nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Load hung on junk")
	}
	if len(recs) != 1 || !recs["good"].Succeeded() {
		t.Errorf("Load = %v, want only good's success", recs)
	}
	if len(errs) != len(bad) {
		t.Errorf("Load gave %d errors, want %d: %v", len(errs), len(bad), errs)
	}
	for _, name := range bad {
		found := false
		for _, err := range errs {
			found = found || strings.Contains(err.Error(), filepath.Join(d.Path(), name)+":")
		}
		if !found {
			t.Errorf("no error names %s: %v", name, errs)
		}
	}
}

// LoadUpTo's bound counts every entry it examines, skipped ones included:
// junk that any uid can plant must not make a read cost more. (It counted
// only the records that loaded, and opened every planted file.)
func TestLoadUpToCountsSkippedEntries(t *testing.T) {
	d := newDir(t)
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(d.Path(), fmt.Sprint("junk-", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recs, errs, complete := d.LoadUpTo(nil, 10)
	if len(recs) != 0 || len(errs) != 11 || !strings.Contains(errs[10].Error(), "more than 10 entries") || complete {
		t.Fatalf("LoadUpTo(nil, 10) over 100 junk files = %v, %d errors, complete %v; want 10 skipped and the bound", recs, len(errs), complete)
	}
	if _, _, complete := d.LoadUpTo(nil, 0); !complete {
		t.Error("LoadUpTo without a bound did not say it read the whole listing")
	}
}

func TestLoadAllowedUIDs(t *testing.T) {
	skipUnlessRoot(t)
	d := newDir(t)
	for _, name := range []string{"mine", "theirs"} {
		if err := d.Write(Record{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(d.Path(), "theirs"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	me := uint32(os.Geteuid())
	tests := []struct {
		allowed []uint32
		want    []string
		errs    int
	}{
		{nil, []string{"mine", "theirs"}, 0},
		{[]uint32{me, 4242}, []string{"mine", "theirs"}, 0},
		{[]uint32{me}, []string{"mine"}, 1},
		{[]uint32{4242}, []string{"theirs"}, 1},
		{[]uint32{7}, nil, 2},
	}
	for _, tt := range tests {
		recs, errs := d.Load(tt.allowed)
		if len(recs) != len(tt.want) || len(errs) != tt.errs {
			t.Errorf("Load(%v) = %v, %v; want %v and %d errors", tt.allowed, recs, errs, tt.want, tt.errs)
		}
		for _, name := range tt.want {
			if _, ok := recs[name]; !ok {
				t.Errorf("Load(%v) lacks %s", tt.allowed, name)
			}
		}
		for _, err := range errs {
			if !strings.Contains(err.Error(), "not allowed") {
				t.Errorf("Load(%v): %v", tt.allowed, err)
			}
		}
	}
	if recs, _ := d.Load(nil); recs["theirs"].UID != 4242 {
		t.Errorf("theirs has UID %d, want 4242", recs["theirs"].UID)
	}
}

func TestLoadMissingDir(t *testing.T) {
	recs, errs := Open(t.TempDir()).Load(nil)
	if recs == nil || len(recs) != 0 || len(errs) != 1 || !errors.Is(errs[0], fs.ErrNotExist) {
		t.Errorf("Load of a missing dir = %v, %v", recs, errs)
	}
}

func TestConcurrentWritersOfDifferentNames(t *testing.T) {
	d := newDir(t)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- d.Write(Record{Name: fmt.Sprintf("peer-%d", i), ExitCode: i % 256})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	recs, lerrs := d.Load(nil)
	if len(lerrs) > 0 {
		t.Fatal(lerrs)
	}
	if len(recs) != n {
		t.Fatalf("Load: %d records, want %d", len(recs), n)
	}
	for i := range n {
		if r := recs[fmt.Sprintf("peer-%d", i)]; r.ExitCode != i%256 {
			t.Errorf("peer-%d = %+v", i, r)
		}
	}
	if ents, _ := os.ReadDir(d.Path()); len(ents) != n {
		t.Errorf("%d files, want %d: temp files left behind?", len(ents), n)
	}
}

func TestConcurrentWritersOfOneName(t *testing.T) {
	d := newDir(t)
	if err := d.Write(Record{Name: "app"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.Path(), "app")
	stop := make(chan struct{})
	var reads, torn int
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(path)
			reads++
			if err != nil {
				torn++
				continue
			}
			if r, err := decode(b); err != nil || r.Name != "app" {
				torn++
			}
		}
	}()

	const writers, each = 50, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := d.Write(Record{Name: "app", ExitCode: (w*each + i) % 256}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-readerDone
	if torn > 0 {
		t.Errorf("%d of %d reads saw a missing or partial record", torn, reads)
	}
	recs, errs := d.Load(nil)
	if len(errs) > 0 || len(recs) != 1 || !recs["app"].Final() {
		t.Errorf("Load = %v, %v; want one final record", recs, errs)
	}
	if ents, _ := os.ReadDir(d.Path()); len(ents) != 1 {
		t.Errorf("%d files, want 1", len(ents))
	}
}

func skipUnlessRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// A client holds peers/ only when a trusted uid owns it, and then writes
// through it whatever the path names later (issue 26, 2.3).
func TestHoldChecksTheOwnerAndKeepsTheDirectory(t *testing.T) {
	me := uint32(os.Geteuid())
	trustMe := func(uid uint32) bool { return uid == me }
	d := newDir(t)
	if _, err := d.Hold(func(uint32) bool { return false }); !errors.As(err, new(*UntrustedDirError)) || !strings.Contains(err.Error(), fmt.Sprint("uid ", me)) {
		t.Fatalf("Hold of an untrusted owner's directory: %v; want an *UntrustedDirError naming the uid", err)
	}
	h, err := d.Hold(trustMe)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	away := d.Path() + ".away"
	if err := os.Rename(d.Path(), away); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.Path(), 0o777); err != nil {
		t.Fatal(err)
	}
	run, err := h.Begin("app")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(3, Exited, Stop{}); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := Open(filepath.Dir(away)).Get("app", nil); ok || err != nil {
		t.Fatalf("the run wrote by the path: %+v %v %v", r, ok, err)
	}
	if ents, _ := os.ReadDir(d.Path()); len(ents) != 0 {
		t.Fatalf("the run wrote %d entries into the directory now at the path", len(ents))
	}
	b, err := os.ReadFile(filepath.Join(away, "app"))
	if err != nil || !strings.Contains(string(b), `"exit_code":3`) {
		t.Fatalf("the held directory's record: %q %v", b, err)
	}

	// A symlink in its place is refused, naming its owner, as untrusted.
	if err := os.Remove(d.Path()); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(away, d.Path()); err != nil {
		t.Fatal(err)
	}
	var u *UntrustedDirError
	if _, err := d.Hold(trustMe); !errors.As(err, &u) || !u.NotDir {
		t.Fatalf("Hold of a symlink: %v; want an *UntrustedDirError that is not a directory", err)
	}
	// Missing is missing: the client waits for the supervisor to make it.
	if _, err := Open(t.TempDir()).Hold(trustMe); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Hold of a missing directory: %v", err)
	}
}
