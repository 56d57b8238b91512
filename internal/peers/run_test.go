package peers

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The test binary doubles as a peer in another process, so that a lock
// holder can really die and a write can really come from another uid.
const (
	helperEnv  = "PEERS_TEST_HELPER"
	controlEnv = "PEERS_TEST_CONTROL"
	nameEnv    = "PEERS_TEST_NAME"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "hold":
		os.Exit(helperHold())
	case "write":
		os.Exit(helperWrite())
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode")
		os.Exit(2)
	}
}

// helperHold begins a run, says so, and holds the lock until killed or
// until its stdin closes.
func helperHold() int {
	run, err := Open(os.Getenv(controlEnv)).Begin(os.Getenv(nameEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(run)
	return 0
}

// helperWrite writes a success for its name, then begins and finishes a
// run. It exits 3 on a permission error.
func helperWrite() int {
	d := Open(os.Getenv(controlEnv))
	name := os.Getenv(nameEnv)
	err := d.Write(Record{Name: name})
	if err == nil {
		var run *Run
		if run, err = d.Begin(name); err == nil {
			err = run.Finish(0, Exited, Stop{})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, os.ErrPermission) {
			return 3
		}
		return 1
	}
	return 0
}

func helper(t *testing.T, mode string, d Dir, name string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, controlEnv+"="+filepath.Dir(d.Path()), nameEnv+"="+name)
	cmd.Stderr = os.Stderr
	return cmd
}

// holder starts a process that holds <name>'s lock; kill ends it.
func holder(t *testing.T, d Dir, name string) (kill func()) {
	t.Helper()
	cmd := helper(t, "hold", d, name)
	stdin, stdout := proctest.Piped(t, cmd)
	var once sync.Once
	kill = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			stdin.Close()
		})
	}
	t.Cleanup(kill)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("holder: %q, %v", line, err)
	}
	return kill
}

func load(t *testing.T, d Dir, name string) Record {
	t.Helper()
	recs, errs := d.Load(nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	r, ok := recs[name]
	if !ok {
		t.Fatalf("no record %s in %v", name, recs)
	}
	return r
}

func TestBeginFinish(t *testing.T) {
	tests := []struct {
		code   int
		reason Reason
		want   Record
	}{
		{0, Exited, Record{Name: "app", Reason: Exited}},
		{0, "", Record{Name: "app", Reason: Exited}},
		{3, Exited, Record{Name: "app", ExitCode: 3, Reason: Exited}},
		{143, Signaled, Record{Name: "app", ExitCode: 143, Reason: Signaled}},
		{NotReadyCode, NotReady, Record{Name: "app", ExitCode: 69, Reason: NotReady}},
	}
	for _, tt := range tests {
		d := newDir(t)
		run, err := d.Begin("app")
		if err != nil {
			t.Fatal(err)
		}
		running := load(t, d, "app")
		if !running.Running || running.Final() {
			t.Errorf("after Begin: %+v, want running", running)
		}
		if err := run.Finish(tt.code, tt.reason, Stop{}); err != nil {
			t.Fatal(err)
		}
		got := load(t, d, "app")
		// Both records say when this container started (the test's).
		if got.Started.IsZero() || !got.Started.Equal(running.Started) || got.Started.After(got.Time) {
			t.Errorf("Finish: started %v, the running record's %v, at %v: want the same, not zero, before", got.Started, running.Started, got.Time)
		}
		got.Time, got.UID, got.Started = time.Time{}, 0, time.Time{}
		if got != tt.want {
			t.Errorf("Finish(%d, %q): %+v, want %+v", tt.code, tt.reason, got, tt.want)
		}
		if err := run.Finish(0, Exited, Stop{}); err == nil {
			t.Error("a second Finish succeeded")
		}
		if err := run.Abort(); err == nil {
			t.Error("Abort after Finish succeeded")
		}
	}
}

func TestFinishRefusesBadOutcome(t *testing.T) {
	d := newDir(t)
	run, err := d.Begin("app")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		code   int
		reason Reason
	}{{256, Exited}, {-1, Exited}, {9, Signaled}, {0, Lost}, {0, NotReady}, {1, "oom"}} {
		if err := run.Finish(tt.code, tt.reason, Stop{}); err == nil {
			t.Errorf("Finish(%d, %q) succeeded", tt.code, tt.reason)
		}
	}
	// A refused Finish changes nothing: the run goes on.
	if r := load(t, d, "app"); !r.Running {
		t.Errorf("after refused Finishes: %+v, want running", r)
	}
	if err := run.Finish(1, Exited, Stop{}); err != nil {
		t.Fatal(err)
	}
}

func TestAbortIsLost(t *testing.T) {
	d := newDir(t)
	run, err := d.Begin("app")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Abort(); err != nil {
		t.Fatal(err)
	}
	r := load(t, d, "app")
	if r.Reason != Lost || r.ExitCode != LostCode || !r.Failed() || r.Started.IsZero() {
		t.Errorf("after Abort: %+v, want lost/137, with the run's container start", r)
	}
	// Load reports lost but leaves the file as it is.
	b, err := os.ReadFile(filepath.Join(d.Path(), "app"))
	if err != nil || !strings.Contains(string(b), `"running":true`) {
		t.Errorf("record after Load: %s, %v", b, err)
	}
}

func TestBeginReplacesStaleFinal(t *testing.T) {
	d := newDir(t)
	if err := d.Write(Record{Name: "app", ExitCode: 0}); err != nil {
		t.Fatal(err)
	}
	run, err := d.Begin("app")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Abort()
	recs, _ := d.Load(nil)
	if r := recs["app"]; !r.Running {
		t.Errorf("after Begin over a success: %+v, want running", r)
	}
	if v := (Policy{Count: 1}).Decide(recs); v.Done || v.Settled {
		t.Errorf("an earlier run's success ended a later run: %+v", v)
	}
}

func TestBeginRefusesHeldName(t *testing.T) {
	d := newDir(t)
	run, err := d.Begin("app")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Begin("app"); err == nil {
		t.Error("a second Begin of a held name succeeded")
	}
	if err := run.Abort(); err != nil {
		t.Fatal(err)
	}
	again, err := d.Begin("app")
	if err != nil {
		t.Fatalf("Begin after the holder ended: %v", err)
	}
	again.Abort()
	if _, err := d.Begin("Bad"); err == nil {
		t.Error("Begin of an invalid name succeeded")
	}
}

func TestKilledHolderIsLost(t *testing.T) {
	d := newDir(t)
	if err := d.Write(Record{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	kill := holder(t, d, "app")
	if r := load(t, d, "app"); !r.Running {
		t.Fatalf("while the holder lives: %+v, want running", r)
	}
	if v := (Policy{Count: 2}).Decide(mustLoad(t, d)); v.Settled || len(v.Pending) != 1 || v.Pending[0] != "app" {
		t.Errorf("while the holder lives: %+v, want app pending", v)
	}
	kill()
	r := load(t, d, "app")
	if r.Reason != Lost || r.ExitCode != LostCode {
		t.Fatalf("after SIGKILL: %+v, want lost/137", r)
	}
	if v := (Policy{Count: 2}).Decide(mustLoad(t, d)); !v.Done || v.Code != LostCode || v.Failed != "app" {
		t.Errorf("after SIGKILL: %+v, want done with 137", v)
	}
}

func mustLoad(t *testing.T, d Dir) map[string]Record {
	t.Helper()
	recs, errs := d.Load(nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return recs
}

// next returns the next name n reports, within d.
func next(t *testing.T, n *Notifier, d time.Duration) string {
	t.Helper()
	ch := make(chan string, 1)
	errs := make(chan error, 1)
	go func() {
		name, err := n.Next()
		if err != nil {
			errs <- err
			return
		}
		ch <- name
	}()
	select {
	case name := <-ch:
		return name
	case err := <-errs:
		t.Fatalf("Next: %v", err)
	case <-time.After(d):
		t.Fatalf("nothing reported within %v", d)
	}
	return ""
}

func notify(t *testing.T, d Dir) *Notifier {
	t.Helper()
	n, err := d.Notify()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// The death of a running record's holder is reported by name, and the
// record then reads as lost.
func TestNotifyHolderDies(t *testing.T) {
	d := newDir(t)
	kill := holder(t, d, "app")
	n := notify(t, d)
	kill()
	if name := next(t, n, 5*time.Second); name != "app" {
		t.Fatalf("reported %q, want app", name)
	}
	if r := load(t, d, "app"); r.Reason != Lost {
		t.Errorf("after the report: %+v, want lost", r)
	}
}

// Finish, Write and Begin are reported; reads, temp files and claims are
// not.
func TestNotifyReportsWritesOnly(t *testing.T) {
	d := newDir(t)
	n := notify(t, d)
	run, err := d.Begin("job")
	if err != nil {
		t.Fatal(err)
	}
	if name := next(t, n, 5*time.Second); name != "job" {
		t.Fatalf("Begin reported %q", name)
	}
	mustLoad(t, d) // a read raises nothing
	if err := run.Finish(4, Exited, Stop{}); err != nil {
		t.Fatal(err)
	}
	if name := next(t, n, 5*time.Second); name != "job" {
		t.Fatalf("Finish reported %q", name)
	}
	if err := d.Write(Record{Name: "side"}); err != nil {
		t.Fatal(err)
	}
	for {
		// Finish may also report the old locked file's close.
		if name := next(t, n, 5*time.Second); name == "side" {
			break
		} else if name != "job" {
			t.Fatalf("reported %q", name)
		}
	}
}

// Close ends a Next under way.
func TestNotifyClose(t *testing.T) {
	n, err := newDir(t).Notify()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := n.Next(); done <- err }()
	n.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Next after Close returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return after Close")
	}
}

// A reader racing Begin and Finish must never call a live run lost: the
// inode check catches a final record renamed in between open and probe.
func TestLoadDuringFinishNeverLost(t *testing.T) {
	d := newDir(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(stop)
		for i := range 100 {
			run, err := d.Begin("app")
			if err != nil {
				t.Error(err)
				return
			}
			if err := run.Finish(i%2, Exited, Stop{}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var loads, running int
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		recs, errs := d.Load(nil)
		loads++
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		r, ok := recs["app"]
		if ok && r.Reason == Lost {
			t.Fatalf("load %d saw a live run as lost", loads)
		}
		if r.Running {
			running++
		}
	}
	wg.Wait()
	t.Logf("%d loads, %d saw the run in progress", loads, running)
}

// The sticky bit is what stops one peer from replacing another's record.
// Root bypasses it, so the peers here are helper processes of other uids.
func TestStickyDirProtectsRecords(t *testing.T) {
	skipUnlessRoot(t)
	// Another uid needs a path it can traverse, to the binary and the dir.
	base, err := os.MkdirTemp("", "peers-sticky-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "peers.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	d := Open(filepath.Join(base, "control"))
	if err := d.Create(); err != nil {
		t.Fatal(err)
	}

	as := func(uid uint32, name string) error {
		cmd := helper(t, "write", d, name)
		cmd.Path = bin
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd.Run()
	}
	tests := []struct {
		uid  uint32
		name string
		code int // 3: refused with a permission error
	}{
		{4242, "a", 0},
		{4242, "a", 0}, // its own record again
		{4243, "a", 3}, // another uid's record
		{4243, "b", 0},
		{4242, "b", 3},
	}
	for _, tt := range tests {
		err := as(tt.uid, tt.name)
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tt.code {
			t.Errorf("uid %d writing %s: exit %d, want %d", tt.uid, tt.name, code, tt.code)
		}
	}
	recs := mustLoad(t, d)
	if recs["a"].UID != 4242 || recs["b"].UID != 4243 {
		t.Errorf("owners: a=%d b=%d, want 4242 and 4243", recs["a"].UID, recs["b"].UID)
	}
}

// Unwatch removes the kernel's watch at once (the descriptor's fdinfo no
// longer lists it), and a Next under way then ends with ErrUnwatched, which
// says the watch was given up on purpose.
func TestNotifyUnwatch(t *testing.T) {
	d := newDir(t)
	n := notify(t, d)
	fdinfo := fmt.Sprintf("/proc/self/fdinfo/%d", n.f.Fd())
	if b, err := os.ReadFile(fdinfo); err != nil || !strings.Contains(string(b), "inotify wd:") {
		t.Fatalf("no watch listed before Unwatch (%v):\n%s", err, b)
	}
	done := make(chan error, 1)
	go func() { _, err := n.Next(); done <- err }()
	if err := n.Unwatch(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(fdinfo); err != nil || strings.Contains(string(b), "inotify wd:") {
		t.Fatalf("watch still listed after Unwatch (%v):\n%s", err, b)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrUnwatched) {
			t.Fatalf("Next after Unwatch: %v, want ErrUnwatched", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return after Unwatch")
	}
	if err := n.Unwatch(); err != nil {
		t.Fatalf("second Unwatch: %v", err)
	}
}
