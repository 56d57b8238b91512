// Command test-summary runs `go test -json` with the given arguments and
// prints what a reader of CI's log needs: each package's result with its
// counts and time, every skipped test with its reason, every failed test
// with its whole output (past 8 MiB, its first and last 4), and the
// packages' own output (a TestMain's lines), as they happen. Without it a
// skip inside a package is invisible, and -v buries it among thousands of
// lines. Where the test binaries run under
// scripts/budget (go test -exec), each package's line ends with the peak
// memory and disk of its test binary beside its budget, and the closing
// line with the largest of them. It exits with go test's code.
//
//	go run ./scripts/test-summary -race -count=1 ./...
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/scripts/internal/budgetline"
	"github.com/proxy-supervisor/proxy-supervisor/scripts/internal/testjson"
)

func main() {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test-summary:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "test-summary:", err)
		os.Exit(2)
	}
	s := newSummary(os.Stdout)
	s.read(out)
	err = cmd.Wait()
	s.total()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "test-summary:", err)
		os.Exit(2)
	}
}

type counts struct{ pass, skip, fail int }

type summary struct {
	w      io.Writer
	output map[string]*output         // by package and test: the test's output
	counts map[string]*counts         // by package
	peaks  map[string]budgetline.Peak // by package: scripts/budget's report
}

// keep is how much of a running test's output is held, at its start and
// again at its end: every test that runs at once holds its own, and a
// test's output grows with how long it runs (one that logs every poll of
// a fault until its deadline) and with its processes' (each up to 3 MiB
// with proctest).
const keep = 4 << 20

// output is a test's output as it comes: whole up to twice keep, else its
// first and last keep bytes of lines around a line that says what is cut.
type output struct {
	head, tail   []string
	headN, tailN int // their bytes
	cut, cutN    int // lines and bytes dropped between them
}

func (o *output) add(s string) {
	if o.cut == 0 && len(o.tail) == 0 && o.headN+len(s) <= keep {
		o.head = append(o.head, s)
		o.headN += len(s)
		return
	}
	o.tail = append(o.tail, s)
	o.tailN += len(s)
	for o.tailN > keep && len(o.tail) > 1 {
		o.cut++
		o.cutN += len(o.tail[0])
		o.tailN -= len(o.tail[0])
		o.tail = o.tail[1:]
	}
}

// lines are the output's lines as kept, with the cut's.
func (o *output) lines() []string {
	if o == nil {
		return nil
	}
	if o.cut == 0 {
		return append(o.head[:len(o.head):len(o.head)], o.tail...)
	}
	cut := fmt.Sprintf("[test-summary: %d lines (%d bytes) of the output cut here]\n", o.cut, o.cutN)
	return append(append(o.head[:len(o.head):len(o.head)], cut), o.tail...)
}

func (o *output) String() string { return strings.Join(o.lines(), "") }

// total prints the counts of every package on one line, in the plain form
// that CI's log reader takes for a test runner's closing line.
func (s *summary) total() {
	var all counts
	for _, c := range s.counts {
		all.pass += c.pass
		all.skip += c.skip
		all.fail += c.fail
	}
	fmt.Fprintf(s.w, "summary: %d passed, %d failed, %d skipped%s\n", all.pass, all.fail, all.skip, s.largestPeaks())
}

// largestPeaks is the largest peak memory and disk of a package's test
// binary, each with its budget and package.
func (s *summary) largestPeaks() string {
	var mem, disk budgetline.Peak
	var memPkg, diskPkg string
	for pkg, p := range s.peaks {
		if memPkg == "" || p.Memory > mem.Memory || (p.Memory == mem.Memory && pkg < memPkg) {
			mem, memPkg = p, pkg
		}
		if diskPkg == "" || p.Disk > disk.Disk || (p.Disk == disk.Disk && pkg < diskPkg) {
			disk, diskPkg = p, pkg
		}
	}
	if memPkg == "" {
		return ""
	}
	return fmt.Sprintf("; peak memory %s (%s), disk %s (%s)", ofBudget(mem.Memory, mem.MemoryBudget), memPkg, ofBudget(disk.Disk, disk.DiskBudget), diskPkg)
}

func ofBudget(n, budget int64) string {
	if budget == 0 {
		return budgetline.FormatSize(n) + " of no budget"
	}
	return budgetline.FormatSize(n) + " of " + budgetline.FormatSize(budget)
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, output: map[string]*output{}, counts: map[string]*counts{}, peaks: map[string]budgetline.Peak{}}
}

func (s *summary) read(r io.Reader) {
	testjson.Read(r, s.event, func(line []byte) { fmt.Fprintf(s.w, "%s\n", line) }) //nolint:errcheck // a cut pipe ends go test too
}

func (s *summary) event(e testjson.Event) {
	key := e.Package + " " + e.Test
	c := s.counts[e.Package]
	if c == nil {
		c = &counts{}
		s.counts[e.Package] = c
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.w, e.Output)
	case "output":
		if p, ok := budgetline.ParsePeak(e.Output); ok {
			s.peaks[e.Package] = p
			return
		}
		if e.Test == "" {
			if !goTestsOwn(e.Output) {
				fmt.Fprint(s.w, e.Output)
			}
			return
		}
		o := s.output[key]
		if o == nil {
			o = &output{}
			s.output[key] = o
		}
		o.add(e.Output)
	case "pass", "skip", "fail":
		if e.Test == "" {
			s.packageDone(e, c)
			return
		}
		switch e.Action {
		case "pass":
			c.pass++
		case "skip":
			c.skip++
			fmt.Fprintf(s.w, "    SKIP %s %s: %s\n", e.Package, e.Test, reason(s.output[key].lines()))
		case "fail":
			c.fail++
			fmt.Fprintf(s.w, "--- FAIL %s %s (%s)\n%s", e.Package, e.Test, secs(e.Elapsed), s.output[key])
		}
		delete(s.output, key)
	}
}

func (s *summary) packageDone(e testjson.Event, c *counts) {
	if e.Action == "fail" {
		s.unfinished(e.Package, c)
	}
	switch {
	case e.Action == "skip":
		fmt.Fprintf(s.w, "?    %s [no test files]\n", e.Package)
	default:
		result := "ok  "
		if e.Action == "fail" {
			result = "FAIL"
		}
		fmt.Fprintf(s.w, "%s %s %s: %d passed", result, e.Package, secs(e.Elapsed), c.pass)
		if c.skip > 0 {
			fmt.Fprintf(s.w, ", %d skipped", c.skip)
		}
		if c.fail > 0 {
			fmt.Fprintf(s.w, ", %d failed", c.fail)
		}
		if p, ok := s.peaks[e.Package]; ok {
			fmt.Fprintf(s.w, "; peak memory %s, disk %s", ofBudget(p.Memory, p.MemoryBudget), ofBudget(p.Disk, p.DiskBudget))
		}
		fmt.Fprintln(s.w)
	}
}

// unfinished prints, as failed, every test of a failed package that never
// ended: one that ran into go test's -timeout, or was running when a
// panic in another goroutine ended the binary. Its output is the only trace
// of the hang or the panic.
func (s *summary) unfinished(pkg string, c *counts) {
	var keys []string
	for key := range s.output {
		if p, test, _ := strings.Cut(key, " "); p == pkg && test != "" {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		c.fail++
		_, test, _ := strings.Cut(key, " ")
		fmt.Fprintf(s.w, "--- FAIL %s %s (did not finish)\n%s", pkg, test, s.output[key])
		delete(s.output, key)
	}
}

// goTestsOwn are the package-level lines go test prints itself, which the
// package's summary line replaces.
func goTestsOwn(line string) bool {
	l := strings.TrimRight(line, "\n")
	return l == "PASS" || l == "FAIL" || strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "?   \t") ||
		strings.HasPrefix(l, "--- FAIL") || strings.HasPrefix(l, "=== RUN") || l == "testing: warning: no tests to run"
}

// reason is a skipped test's message: its output without the framing
// lines, on one line.
func reason(lines []string) string {
	var out []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return "(no reason given)"
	}
	return strings.Join(out, " | ")
}

// secs is a duration as go test gives it below a minute (1.25s), and in
// minutes above (10m40.8s).
func secs(s float64) string {
	if s < 60 {
		return fmt.Sprintf("%.2fs", s)
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}
