package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lines writes n numbered lines to b, one a write.
func lines(b *Buffer, from, n int) {
	for i := from; i < from+n; i++ {
		fmt.Fprintf(b, "line %03d\n", i)
	}
}

// Under its bounds a Buffer is all that was written; past them, its first
// and last whole lines around a marker that says how much is missing.
func TestBufferKeepsItsHeadAndTail(t *testing.T) {
	b := &Buffer{headCap: 40, tailCap: 40}
	lines(b, 0, 4) // 36 bytes
	if got, want := b.String(), "line 000\nline 001\nline 002\nline 003\n"; got != want || b.Cut() != 0 {
		t.Fatalf("under the bounds: %q (cut %d), want %q", got, b.Cut(), want)
	}
	lines(b, 4, 100)
	got := b.String()
	if b.Cut() == 0 || !strings.HasPrefix(got, "line 000\nline 001\nline 002\nline 003\n[proctest: ") ||
		!strings.HasSuffix(got, "line 102\nline 103\n") {
		t.Fatalf("past the bounds (cut %d):\n%s", b.Cut(), got)
	}
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if !strings.HasPrefix(l, "line ") && !strings.HasPrefix(l, "[proctest: ") || strings.HasPrefix(l, "line ") && len(l) != 8 {
			t.Errorf("a partial line %q in:\n%s", l, got)
		}
	}
	// What it says is missing is what is: every byte is kept, cut or
	// marked.
	marker := got[strings.Index(got, "[proctest: "):]
	marker = marker[:strings.IndexByte(marker, '\n')+1]
	var cut int
	fmt.Sscanf(marker, "[proctest: %d bytes", &cut)
	if kept := len(got) - len(marker); kept+cut != 104*9 {
		t.Errorf("%d bytes kept and %d said cut, want %d in all", kept, cut, 104*9)
	}
	if len(got) > 40+2*40+len(marker) {
		t.Errorf("%d bytes kept, over its bounds", len(got))
	}
}

// A watch sees a string in everything written after it began, whether the
// buffer cut it or it came in pieces; and in what was written before, as
// long as the buffer keeps it.
func TestBufferWatchSeesWhatItCuts(t *testing.T) {
	b := &Buffer{headCap: 16, tailCap: 16}
	lines(b, 0, 1)
	before, _, stop := b.watch("line 000")
	defer stop()
	if !before() {
		t.Fatal("the watch missed a line the buffer keeps")
	}
	seen, _, stop := b.watch("the needle")
	defer stop()
	b.Write([]byte("x the nee"))
	b.Write([]byte("dle y\n"))
	lines(b, 1, 20)
	if strings.Contains(b.String(), "the needle") {
		t.Fatalf("the buffer kept what the test needs cut:\n%s", b.String())
	}
	if !seen() {
		t.Fatal("the watch missed a string written in two pieces and cut since")
	}
	never, cut, stop := b.watch("line 005") // cut before the watch began
	stop()
	if cut == 0 {
		t.Fatal("a watch begun after a cut says nothing was cut before it")
	}
	if never() {
		t.Fatal("a watch saw a line cut before it began")
	}
	lines(b, 5, 1)
	if never() {
		t.Fatal("a stopped watch went on looking")
	}
}

// recorder is a testing.TB whose errors and cleanups the test runs itself.
type recorder struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper()                   {}
func (r *recorder) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }

func (r *recorder) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// junk is a shell command that writes about n MiB of lines.
func junk(n int) string {
	return fmt.Sprintf("yes 0123456789012345678901234567890123456789012345678901234567890123 | head -c %d", n<<20)
}

// A race reported in the middle of more output than a Proc keeps still
// fails the test.
func TestRaceReportInCutOutputFails(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	pr := Start(r, "racer", exec.Command("/bin/sh", "-c", junk(2)+"; echo '"+raceReport+"'; "+junk(3)))
	if code := pr.Exit(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(pr.Out.String(), raceReport) || pr.Out.Cut() == 0 {
		t.Fatalf("the output was not cut where the race was reported (cut %d)", pr.Out.Cut())
	}
	r.cleanup()
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "racer reported a data race") {
		t.Fatalf("errors %q, want the race", r.errs)
	}
}

// WaitLog sees a line written while it waits even where the output is cut.
func TestWaitLogSeesALineItsOutputCuts(t *testing.T) {
	t.Parallel()
	go1 := filepath.Join(t.TempDir(), "go")
	// The process writes its line, and more than a Proc keeps around it,
	// once WaitLog watches.
	pr := Start(t, "writer", exec.Command("/bin/sh", "-c",
		fmt.Sprintf("%s; while [ ! -e %s ]; do sleep 0.01; done; %s; echo the needle; %s; echo all written; sleep 60", junk(2), go1, junk(1), junk(3))))
	go func() {
		Until(30*time.Second, func() bool {
			pr.Out.mu.Lock()
			defer pr.Out.mu.Unlock()
			return len(pr.Out.watches) > 1 // the race check's and WaitLog's
		})
		os.WriteFile(go1, nil, 0o644)
	}()
	pr.WaitLog("the needle", 30*time.Second)
	pr.WaitLog("all written", 30*time.Second)
	if strings.Contains(pr.Out.String(), "the needle") {
		t.Fatal("the output kept the line: the test proves nothing")
	}
}

// ReadFile gives a small file whole, and of a large one what a Buffer
// keeps, reading no more.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(small); err != nil || got != "one\ntwo\n" {
		t.Fatalf("a small file: %q, %v", got, err)
	}
	large := filepath.Join(dir, "large")
	var b strings.Builder
	b.WriteString("first\n")
	for b.Len() < 3*keepHead {
		b.WriteString("0123456789012345678901234567890123456789\n")
	}
	b.WriteString("last\n")
	if err := os.WriteFile(large, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(large)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "first\n") || !strings.HasSuffix(got, "\nlast\n") || !strings.Contains(got, "\n[proctest: ") ||
		len(got) > keepHead+keepTail+200 {
		t.Fatalf("a large file: %d bytes, from %q to %q", len(got), got[:20], got[len(got)-20:])
	}
}
