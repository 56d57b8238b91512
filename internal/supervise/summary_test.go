package supervise

import (
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The exit's summary replaces the termination message file's content, as
// the kubelet reads it into the container's status.
func TestSummaryInTheTerminationMessage(t *testing.T) {
	path := filepath.Join(proctest.ShortDir(t), "termination-log")
	if err := os.WriteFile(path, []byte("an older message, longer than the summary will be, to be replaced whole\n"+string(make([]byte, 600))), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startSupervisor(t, func(_ *harness, c *Config) { c.TerminationLog = path })
	h.waitReady()
	h.signal(syscall.SIGTERM)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^proxy-supervisor: exit 0 \(SIGTERM\); ready [0-9.]+m?s after start; exit [0-9.]+m?s after the decision\n$`)
	if !want.Match(b) {
		t.Fatalf("termination message %q, want it to match %s", b, want)
	}
}

// A job that the records settle at start never starts the proxy: the
// summary says so.
func TestSummaryOfAJobSettledAtStart(t *testing.T) {
	path := filepath.Join(proctest.ShortDir(t), "termination-log")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := setup(t, func(_ *harness, c *Config) { c.TerminationLog = path })
	d := peers.Open(h.dir)
	if err := d.Create(); err != nil {
		t.Fatal(err)
	}
	if err := d.Write(peers.Record{Name: "app", ExitCode: 3, Reason: peers.Exited}); err != nil {
		t.Fatal(err)
	}
	h.start()
	if code := h.wait(5 * time.Second); code != 3 {
		t.Fatalf("Run = %d, want 3", code)
	}
	b, _ := os.ReadFile(path)
	if want := regexp.MustCompile(`^proxy-supervisor: exit 3 \(peer app failed with code 3\); never ready; exit \S+ after the decision\n$`); !want.Match(b) {
		t.Fatalf("termination message %q, want it to match %s", b, want)
	}
}

// A file that cannot be written costs the exit one log line, never its
// code; a missing file is not created, and a FIFO without a reader fails at
// once instead of blocking the exit.
func TestSummaryWriteFailuresDoNotTouchTheExit(t *testing.T) {
	dir := proctest.ShortDir(t)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"missing": filepath.Join(dir, "missing"), "fifo": fifo} {
		t.Run(name, func(t *testing.T) {
			h := startSupervisor(t, func(_ *harness, c *Config) { c.TerminationLog = path })
			h.waitReady()
			h.signal(syscall.SIGTERM)
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d, want 0", code)
			}
			h.eventually("the failure logged", func() bool { return h.logged("termination message not written", "path", path) })
			if n := h.countLogged("termination message not written"); n != 1 {
				t.Errorf("%d log lines about it, want 1", n)
			}
			if name == "missing" {
				if _, err := os.Stat(path); err == nil {
					t.Error("the missing file was created")
				}
			}
		})
	}
}
