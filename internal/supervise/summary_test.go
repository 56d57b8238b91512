package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// An exit can come between any two steps of cutting a large termination
// message file (the write's bound ends, or a busy node starves the
// process), so after each step the file's last 4096 bytes, what the
// kubelet reads, must end with the line. A cut file's new tail is its old
// middle: zeros in a file allocated and never written, which is what the
// message was on a loaded machine when only the file's start held the line.
func TestTerminationMessageTailHoldsTheLineAtEveryCut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination-log")
	const line = "proxy-supervisor: exit 127 (proxy could not be started)\n"
	for _, size := range []int64{0, 10, messageMax - 1, messageMax + 100, 3*truncateStep + 12345} {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil { // sparse: reads as zeros
			t.Fatal(err)
		}
		m := message{f: f, line: line, size: max(size, int64(len(line)))}
		check := func(step string) {
			t.Helper()
			st, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			tail := make([]byte, min(st.Size(), messageMax))
			if _, err := f.ReadAt(tail, st.Size()-int64(len(tail))); err != nil {
				t.Fatal(err)
			}
			got := strings.TrimLeft(string(tail), " ")
			if got != line {
				t.Fatalf("file of %d bytes, %s: the kubelet would read %q (%d bytes), want the line after blanks", size, step, got[:min(len(got), 80)], len(got))
			}
		}
		if err := m.place(); err != nil {
			t.Fatal(err)
		}
		check("placed")
		for m.size > int64(len(line)) {
			if err := m.cut(max(m.size-truncateStep, int64(len(line)))); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("cut to %d", m.size))
		}
		f.Close()
		if b, err := os.ReadFile(path); err != nil || string(b) != line {
			t.Fatalf("file of %d bytes, cut to the end: %q, %v; want the line alone", size, b, err)
		}
	}
}
