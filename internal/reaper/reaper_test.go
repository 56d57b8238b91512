package reaper_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The test binary doubles as the orphan factory: in this mode it starts n
// short-lived processes and exits without waiting, so they are orphaned to the
// nearest subreaper, the test process.
func TestMain(m *testing.M) {
	if n := os.Getenv("REAPER_TEST_ORPHANS"); n != "" {
		count, _ := strconv.Atoi(n)
		for i := 0; i < count; i++ {
			if _, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// start runs argv in this process's environment and gives its exit.
func start(r *reaper.Reaper, argv ...string) (<-chan reaper.Exit, error) {
	_, ch, err := r.Start(argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	return ch, err
}

func run(t *testing.T) *reaper.Reaper {
	t.Helper()
	r, err := reaper.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func TestExitCodes(t *testing.T) {
	r := run(t)
	tests := []struct {
		name   string
		script string
		code   int
		signal bool
	}{
		{"success", "exit 0", 0, false},
		{"failure", "exit 3", 3, false},
		{"max", "exit 255", 255, false},
		{"sigterm", "kill -TERM $$", 143, true},
		{"sigkill", "kill -KILL $$", 137, true},
		{"sigsegv", "kill -SEGV $$", 139, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := start(r, "/bin/sh", "-c", tt.script)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case e := <-ch:
				if e.Code() != tt.code || e.Status.Signaled() != tt.signal {
					t.Fatalf("got %v, want code %d (signaled %v)", e, tt.code, tt.signal)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no exit dispatched")
			}
		})
	}
}

// An exit that happens before Start returns must not be taken for an orphan's.
func TestImmediateExitIsNotLost(t *testing.T) {
	r := run(t)
	for i := 0; i < 200; i++ {
		ch, err := start(r, "/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-ch:
			if e.Code() != 0 {
				t.Fatalf("got %v", e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("exit %d lost", i)
		}
	}
}

// 2000 orphans exit while 500 registered children exit with their own codes:
// every code arrives and no zombie is left.
func TestOrphanStorm(t *testing.T) {
	const orphans, children = 2000, 500
	r := run(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, fch, err := r.Start([]string{self}, &syscall.ProcAttr{
		Env:   append(os.Environ(), "REAPER_TEST_ORPHANS="+strconv.Itoa(orphans)),
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, children)
	for i := 0; i < children; i++ {
		code := i % 256
		ch, err := start(r, "/bin/sh", "-c", "exit "+strconv.Itoa(code))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case e := <-ch:
				if e.Code() != code {
					errs <- fmt.Errorf("pid %d: got %v, want %d", e.Pid, e, code)
				}
			case <-time.After(60 * time.Second):
				errs <- fmt.Errorf("exit with code %d never arrived", code)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if e := <-fch; e.Code() != 0 {
		t.Fatalf("orphan factory: %v", e)
	}

	// The factory is gone, so its orphans are ours. Wait (bounded) until every
	// one of them has been reaped.
	if !proctest.Until(60*time.Second, func() bool { return r.Orphans() >= orphans }) {
		t.Errorf("reaped %d orphans, want %d", r.Orphans(), orphans)
	}
	if z := proctest.Zombies(os.Getpid()); len(z) > 0 {
		t.Errorf("%d zombies left: %v", len(z), z)
	}
	// A token, not a count: the reader looks at what it waits for.
	select {
	case <-r.OrphanReaped():
	default:
		t.Error("no word of the orphans reaped")
	}
}

// A command that cannot be started is an error that says why, with the
// code a shell would give it; one without a directory is looked up in PATH.
func TestStartError(t *testing.T) {
	r := run(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		argv []string
		code int
		says string
	}{
		{[]string{filepath.Join(dir, "missing")}, 127, "no such file"},
		{[]string{plain}, 126, "permission denied"},
		{[]string{"proxy-supervisor-no-such-command"}, 127, "not found in $PATH"},
		{nil, 127, "not found"},
	} {
		_, err := start(r, tt.argv...)
		if err == nil || reaper.StartCode(err) != tt.code || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("Start(%q) = %v (code %d); want an error with code %d that says %q", tt.argv, err, reaper.StartCode(err), tt.code, tt.says)
		}
	}
	ch, err := start(r, "true") // from PATH
	if err != nil {
		t.Fatal(err)
	}
	if e := <-ch; e.Code() != 0 {
		t.Fatalf("true from PATH: %v", e)
	}
}

func TestExitCodeMapping(t *testing.T) {
	tests := []struct {
		status unix.WaitStatus
		code   int
	}{
		{0, 0},
		{1 << 8, 1},
		{255 << 8, 255},
		{unix.WaitStatus(unix.SIGTERM), 143},
		{unix.WaitStatus(unix.SIGKILL), 137},
		{unix.WaitStatus(unix.SIGQUIT) | 0x80, 131}, // core dumped
	}
	for _, tt := range tests {
		if got := (reaper.Exit{Status: tt.status}).Code(); got != tt.code {
			t.Errorf("status %#x: code %d, want %d", uint32(tt.status), got, tt.code)
		}
	}
}
