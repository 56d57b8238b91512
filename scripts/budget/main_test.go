package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/scripts/internal/budgetline"
)

// The test binary plays three parts: the tests; budget itself (asBudget
// set), as go test -exec runs it; and the test binary budget runs, whose
// TestHog (hogEnv set) holds memory or writes files as told.
const (
	asBudget = "BUDGET_TEST_AS_BUDGET"
	hogEnv   = "BUDGET_TEST_HOG" // MiB of memory, then MiB of files: "256,0"
)

func TestMain(m *testing.M) {
	switch {
	case len(os.Args) > 3 && os.Args[1] == joinArg:
		join(os.Args[2], os.Args[3:])
	case os.Getenv(asBudget) != "":
		os.Unsetenv(asBudget)
		os.Exit(run(os.Args[1:], os.Stdout))
	case os.Getenv(hogEnv) != "" && os.Getenv("BUDGET_TEST_HOG_IN_MAIN") != "":
		hog(nil, os.Getenv(hogEnv))
	}
	os.Exit(m.Run())
}

var held [][]byte

// hog holds mem MiB, a MiB every 2 ms (every page written) unless fast,
// writes files of disk MiB under a t.TempDir(), then waits to be stopped.
func hog(t *testing.T, spec string) {
	var mem, disk int
	fmt.Sscanf(spec, "%d,%d", &mem, &disk)
	fast := os.Getenv("BUDGET_TEST_HOG_FAST") != ""
	for range mem {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
		if !fast {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if disk > 0 {
		f, err := os.Create(filepath.Join(t.TempDir(), "big"))
		if err != nil {
			t.Fatal(err)
		}
		for range disk {
			if _, err := f.Write(bytes.Repeat([]byte{1}, 1<<20)); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		time.Sleep(3 * diskEvery) // for budget to see them
	}
	if os.Getenv("BUDGET_TEST_HOG_WAIT") != "" {
		time.Sleep(20 * time.Second) // for budget to stop it
	}
}

func TestHog(t *testing.T) {
	spec := os.Getenv(hogEnv)
	if spec == "" {
		return // the test binary's part in the tests below, not a test
	}
	t.Run("quiet", func(t *testing.T) { t.Parallel(); time.Sleep(100 * time.Millisecond) })
	t.Run("hold", func(t *testing.T) { t.Logf("TMPDIR=%s", os.Getenv("TMPDIR")); hog(t, spec) })
}

type event struct {
	Action, Test, Output string
}

type result struct {
	events []event
	exit   error
	out    string
}

// output is the output of test (the package's with ""), joined.
func (r result) output(test string) string {
	var b strings.Builder
	for _, e := range r.events {
		if e.Action == "output" && e.Test == test {
			b.WriteString(e.Output)
		}
	}
	return b.String()
}

func (r result) action(test string) string {
	for _, e := range r.events {
		if e.Test == test && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
			return e.Action
		}
	}
	return ""
}

// runHog runs TestHog as go test -json does, through test2json, under
// budget with flags.
func runHog(t *testing.T, spec string, env []string, flags ...string) result {
	t.Helper()
	needCgroup(t)
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command for go tool test2json")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"tool", "test2json", "-p", "hog", self}, flags...)
	args = append(args, self, "-test.v=test2json", "-test.run=^TestHog$", "-test.timeout=1m")
	cmd := exec.Command(goCmd, args...)
	cmd.Env = append(os.Environ(), asBudget+"=1", hogEnv+"="+spec, "BUDGET_TEST_HOG_WAIT=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	r := result{exit: err, out: string(out)}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("test2json wrote %q: %v\n%s", sc.Text(), err, out)
		}
		r.events = append(r.events, e)
	}
	leftovers(t)
	return r
}

// needCgroup skips without root or a memory cgroup, and fails instead
// under CI=true.
func needCgroup(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root (a memory cgroup)"
	} else if _, err := memoryHierarchy(); err != nil {
		why = err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// leftovers fails the test if budget left a cgroup or a TMPDIR: one named
// after a process gone (budget, here, once it has ended).
func leftovers(t *testing.T) {
	t.Helper()
	h, err := memoryHierarchy()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{h.self, h.mount, os.TempDir()} {
		left, _ := filepath.Glob(filepath.Join(dir, namePrefix+"*"))
		records, _ := filepath.Glob(filepath.Join(dir, "."+namePrefix+"*"))
		for _, l := range append(left, records...) {
			if pid, ok := ownerPid(strings.TrimPrefix(filepath.Base(l), ".")); ok && !alive(pid) {
				t.Errorf("budget left %s", l)
				if b, err := os.ReadFile(l); err == nil {
					if _, err := os.Stat(string(b)); err == nil {
						t.Errorf("budget left %s", b)
					}
				}
			}
		}
	}
}

func TestOverTheMemoryBudgetFailsTheRunningTest(t *testing.T) {
	r := runHog(t, "256,0", nil, "-memory", "64MiB", "-name", "TEST_BUDGET")
	if r.exit == nil {
		t.Errorf("budget exited 0")
	}
	if got := r.action("TestHog/hold"); got != "fail" {
		t.Fatalf("TestHog/hold: %q, want fail; the output:\n%s", got, r.out)
	}
	msg := r.output("TestHog/hold")
	for _, want := range []string{"--- FAIL: TestHog/hold (", "    budget: memory ", " over the budget of 64MiB (TEST_BUDGET) while it ran: ",
		"the most in one process: ", "the test binary was stopped with SIGQUIT", "goroutine "} {
		if !strings.Contains(msg, want) {
			t.Errorf("TestHog/hold's output lacks %q:\n%s", want, msg)
		}
	}
	if got := r.action("TestHog/quiet"); got == "fail" {
		t.Errorf("TestHog/quiet, paused while TestHog/hold ran, failed:\n%s", r.output("TestHog/quiet"))
	}
	if got := r.action(""); got != "fail" {
		t.Errorf("the package: %q, want fail", got)
	}
	p := peak(t, r)
	if p.Memory <= 64<<20 || p.MemoryBudget != 64<<20 {
		t.Errorf("peak %+v, want one over the budget", p)
	}
}

func TestUnderTheBudgetPassesAndReportsThePeak(t *testing.T) {
	r := runHog(t, "32,16", []string{"BUDGET_TEST_HOG_WAIT="}, "-memory", "512MiB", "-disk", "64MiB")
	if r.exit != nil || r.action("TestHog") != "pass" || r.action("") != "pass" {
		t.Fatalf("exit %v, TestHog %q, want a pass:\n%s", r.exit, r.action("TestHog"), r.out)
	}
	p := peak(t, r)
	if p.Memory < 32<<20 || p.Memory > 512<<20 || p.Disk < 16<<20 || p.Disk > 64<<20 || p.MemoryBudget != 512<<20 || p.DiskBudget != 64<<20 {
		t.Errorf("peak %+v, want memory from 32MiB, disk from 16MiB, under the budgets", p)
	}
	if strings.Contains(r.output("TestHog/hold"), "budget:") {
		t.Errorf("a message under the budget:\n%s", r.out)
	}
	// Its own, 5 bytes longer than the one it replaces: a unix socket's
	// path in it must still fit.
	tmp := regexp.MustCompile(`TMPDIR=(.*)\n`).FindStringSubmatch(r.output("TestHog/hold"))
	if tmp == nil || filepath.Dir(tmp[1]) != os.TempDir() || len(tmp[1]) != len(os.TempDir())+5 {
		t.Errorf("TMPDIR %q, want a directory of 4 bytes in %s", tmp, os.TempDir())
	}
}

func TestOverTheDiskBudgetNamesTheDirectory(t *testing.T) {
	r := runHog(t, "0,96", nil, "-disk", "32MiB")
	if got := r.action("TestHog/hold"); got != "fail" {
		t.Fatalf("TestHog/hold: %q, want fail; the output:\n%s", got, r.out)
	}
	msg := r.output("TestHog/hold")
	for _, want := range []string{"    budget: disk ", " over the budget of 32MiB while it ran: the files under the test binary's TMPDIR, the most in TestHoghold"} {
		if !strings.Contains(msg, want) {
			t.Errorf("TestHog/hold's output lacks %q:\n%s", want, msg)
		}
	}
}

// A binary that passes the hard limit between two readings is killed by
// the kernel in its cgroup, not beside its neighbours, and the test fails
// with what happened.
func TestTheHardLimitFailsTheRunningTest(t *testing.T) {
	r := runHog(t, "512,0", []string{"BUDGET_TEST_HOG_FAST=1"}, "-memory", "64MiB", "-memory-limit", "96MiB", "-sample", "1h")
	if got := r.action("TestHog/hold"); got != "fail" {
		t.Fatalf("TestHog/hold: %q, want fail; the output:\n%s", got, r.out)
	}
	msg := r.output("TestHog/hold")
	for _, want := range []string{"budget: the kernel's OOM killer killed ", " in the test binary's cgroup at its hard limit of 96MiB (the budget: 64MiB) while it ran: ", "signal: killed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("TestHog/hold's output lacks %q:\n%s", want, msg)
		}
	}
	if p := peak(t, r); p.Memory < 96<<20 {
		t.Errorf("peak %+v, want the hard limit at least", p)
	}
}

func TestOverTheBudgetOutsideATestFailsThePackage(t *testing.T) {
	r := runHog(t, "256,0", []string{"BUDGET_TEST_HOG_IN_MAIN=1"}, "-memory", "64MiB")
	if got := r.action(""); got != "fail" {
		t.Fatalf("the package: %q, want fail:\n%s", got, r.out)
	}
	if msg := r.output(""); !strings.Contains(msg, "budget: memory ") || !strings.Contains(msg, " while no test ran: ") {
		t.Errorf("the package's output lacks the overrun:\n%s", msg)
	}
}

func peak(t *testing.T, r result) budgetline.Peak {
	t.Helper()
	for _, line := range strings.SplitAfter(r.output(""), "\n") {
		if p, ok := budgetline.ParsePeak(line); ok {
			return p
		}
	}
	t.Fatalf("no peak line in the package's output:\n%s", r.out)
	return budgetline.Peak{}
}

// Without a cgroup of its own (here: not root) budget runs the binary as it
// is after one line, and under CI=true fails.
func TestWithoutACgroupTheBudgetIsNotEnforced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run budget as another user")
	}
	// A copy of this binary that nobody can run.
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o005 != 0o005 {
			if err := os.Chmod(d, st.Mode().Perm()|0o005); err != nil {
				t.Fatal(err)
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "budget.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ci := range []string{"", "true"} {
		cmd := exec.Command(bin, "-memory", "1GiB", bin, "-test.run=^TestHog$", "-test.v")
		cmd.Env = append(os.Environ(), asBudget+"=1", hogEnv+"=1,0", "CI="+ci)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		first, _, _ := strings.Cut(string(out), "\n")
		switch ci {
		case "":
			if err != nil || !strings.HasPrefix(first, "budget: not enforced: no memory cgroup for the test binary (") || !strings.Contains(string(out), "--- PASS: TestHog") {
				t.Errorf("without CI: %v, want the binary run after one line:\n%s", err, out)
			}
		case "true":
			if err == nil || !strings.HasPrefix(first, "budget: cannot enforce the budget, and CI=true: ") || strings.Contains(string(out), "TestHog") {
				t.Errorf("CI=true: %v, want a failure before the binary:\n%s", err, out)
			}
		}
	}
}

// The tracker follows go test -json's framing lines however the output is
// cut, and names the tests doing the work.
func TestTrackerNamesTheRunningTests(t *testing.T) {
	stream := "\x16=== RUN   TestA\n\x16=== PAUSE TestA\n\x16=== RUN   TestB\n" +
		"\x16=== RUN   TestB/one\n\x16=== PAUSE TestB/one\n\x16=== RUN   TestB/two\n" +
		"=== RUN   TestNotFraming\n" + // a test's output, without the marker
		"a partial line\x16=== CONT  TestA\n" +
		"    x_test.go:9: " + strings.Repeat("long ", 20000) + "\n" +
		"\x16--- PASS: TestB/two (0.01s)\n\x16=== CONT  TestB/one\n" +
		"\x16=== RUN   TestC\n\x16--- SKIP: TestC (0.00s)\n"
	for _, size := range []int{1, 7, 4096, len(stream)} {
		tr := newTracker()
		for s := stream; len(s) > 0; {
			n := min(size, len(s))
			tr.write([]byte(s[:n]))
			s = s[n:]
		}
		leaves, parents := tr.busy()
		if got, want := names(leaves), "TestA TestB/one"; got != want {
			t.Errorf("chunks of %d: running %q, want %q", size, got, want)
		}
		if got, want := names(parents), "TestB"; got != want {
			t.Errorf("chunks of %d: parents %q, want %q", size, got, want)
		}
		if !tr.marked {
			t.Errorf("chunks of %d: no marker seen", size)
		}
	}
}

func names(runs []testRun) string {
	var s []string
	for _, r := range runs {
		s = append(s, r.name)
	}
	return strings.Join(s, " ")
}

func TestDiskUsageCountsEachFileOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "a", "b", "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte{1}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(big, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	total, top, topSize := diskUsage(dir)
	if total < 1<<20 || total > 1<<20+64<<10 || top != "a" || topSize < 1<<20 {
		t.Errorf("got %d, the most in %q (%d); want 1MiB and a little, the most in a", total, top, topSize)
	}
}

func TestSizes(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "4GiB": 4 << 30, "512MiB": 512 << 20, "1.5G": 3 << 29, "64K": 64 << 10, "100B": 100} {
		if got, err := budgetline.ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"4", "4TiB", "-1GiB", "GiB"} {
		if _, err := budgetline.ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q): no error", s)
		}
	}
	p := budgetline.Peak{Memory: 812 << 20, MemoryBudget: 4 << 30, Disk: 12<<20 + 1<<19}
	line := p.String()
	if line != "budget: peak memory 812MiB of 4GiB, disk 12.5MiB of none" {
		t.Errorf("peak line %q", line)
	}
	if got, ok := budgetline.ParsePeak(line + "\n"); !ok || got != p {
		t.Errorf("ParsePeak(%q) = %+v, %v", line, got, ok)
	}
	if _, ok := budgetline.ParsePeak("budget: memory 4GiB over"); ok {
		t.Error("ParsePeak read another line")
	}
}

// The Makefile is the one place of the budgets; README states them, and
// every go test run of the Makefile's has one.
func TestTheREADMEStatesTheMakefilesBudgets(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	budgets := regexp.MustCompile(`(?m)^(BUDGET_\w+)\s*\?=\s*-memory (\S+) -disk (\S+)$`).FindAllStringSubmatch(string(mk), -1)
	if len(budgets) == 0 {
		t.Fatal("the Makefile sets no BUDGET_")
	}
	for _, b := range budgets {
		row := regexp.MustCompile("\\(`" + b[1] + "`\\) \\| ([^|]+) \\| ([^|]+) \\|").FindStringSubmatch(string(readme))
		if row == nil {
			t.Errorf("README's table states no %s", b[1])
			continue
		}
		for i, what := range []string{"memory", "disk"} {
			want, err1 := budgetline.ParseSize(b[2+i])
			got, err2 := budgetline.ParseSize(strings.ReplaceAll(row[1+i], " ", ""))
			if err1 != nil || err2 != nil || got != want {
				t.Errorf("%s's %s: %q in the Makefile, %q in README", b[1], what, b[2+i], strings.TrimSpace(row[1+i]))
			}
		}
	}
	for _, line := range strings.Split(string(mk), "\n") {
		if strings.Contains(line, "$(SUMMARY)") && !strings.HasPrefix(line, "#") && !strings.Contains(line, "$(call budget,BUDGET_") {
			t.Errorf("a go test run of the Makefile's without a budget: %s", strings.TrimSpace(line))
		}
	}
}

// What a run killed before its cleanup left (its cgroup, a process in it,
// its TMPDIR) the next run removes.
func TestTheNextRunSweepsWhatAKilledRunLeft(t *testing.T) {
	needCgroup(t)
	h, err := memoryHierarchy()
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	name := namePrefix + strconv.Itoa(gone.Process.Pid)
	cg := &cgroup{dir: filepath.Join(h.self, name), v2: h.v2}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.kill(); cg.remove() })
	left := exec.Command("sleep", "60")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { left.Process.Kill(); left.Wait() })
	if err := writeFile(cg.procsFile(), strconv.Itoa(left.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(os.TempDir(), "b-swept-"+strconv.Itoa(gone.Process.Pid)) // no live run's name
	if err := os.MkdirAll(filepath.Join(tmp, "TestX123", "001"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	record := filepath.Join(os.TempDir(), "."+name)
	if err := os.WriteFile(record, []byte(tmp), 0o644); err != nil {
		t.Fatal(err)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-memory", "1GiB", self, "-test.run=^TestHog$")
	cmd.Env = append(os.Environ(), asBudget+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("budget: %v\n%s", err, out)
	}
	for _, p := range []string{cg.dir, tmp, record} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left", p)
		}
	}
	if err := left.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the process left in the cgroup: %v, want killed", err)
	}
}
