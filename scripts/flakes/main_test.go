package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// events is a run's test2json lines, one per "ACTION TEST [OUTPUT]" line of
// spec, in package p.
func events(spec string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(spec), "\n") {
		f := strings.SplitN(strings.TrimSpace(l), " ", 3)
		test := f[1]
		if test == "-" {
			test = ""
		}
		out := ""
		if len(f) == 3 {
			out = `,"Output":"` + f[2] + `\n"`
		}
		b.WriteString(`{"Action":"` + f[0] + `","Package":"p","Test":"` + test + `"` + out + "}\n")
	}
	return b.String()
}

func runs(t *testing.T, specs ...string) []map[string]result {
	t.Helper()
	var rs []map[string]result
	for _, s := range specs {
		r, err := readRun(strings.NewReader("go: downloading x\n" + events(s)))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

func TestReportPassRatesAndFirstLines(t *testing.T) {
	rs := runs(t, `
run TestA
pass TestA
run TestB
run TestB/sub
output TestB/sub === RUN   TestB/sub
output TestB/sub     b_test.go:10: the proxy exited at 33.1s
output TestB/sub     b_test.go:11: second
output TestB/sub     b_test.go:12: third
output TestB/sub     b_test.go:13: fourth
fail TestB/sub
fail TestB
run TestC
skip TestC
fail -`, `
run TestA
pass TestA
run TestB
run TestB/sub
pass TestB/sub
pass TestB
run TestC
skip TestC
pass -`)
	got := failedReport(t, rs,
		"2/2      100%   p TestA\n",
		"1/2      50%    p TestB\n",
		"1/2      50%    p TestB/sub\n",
		"-        -      p TestC (skipped 2)\n",
		"run 1: p TestB/sub\n    b_test.go:10: the proxy exited at 33.1s\n    b_test.go:11: second\n    b_test.go:12: third\n")
	// The parent's and the package's failures are the subtest's.
	for _, not := range []string{"run 1: p TestB\n", "fourth", "the package itself"} {
		if strings.Contains(got, not) {
			t.Errorf("%q in:\n%s", not, got)
		}
	}
}

// A test that never ended in a failed package (go test's -timeout) failed;
// a package that failed with no failed test is its own line.
func TestReportUnfinishedAndPackageFailures(t *testing.T) {
	rs := runs(t, `
run TestHang
output TestHang panic: test timed out after 1m0s
fail -`, `
output - TestMain: no kubelet
fail -`)
	failedReport(t, rs,
		"0/1      0%     p TestHang\n",
		"run 1: p TestHang\n    panic: test timed out after 1m0s\n    (did not finish: the package ended under it)\n",
		"0/2      0%     p (the package itself)\n",
		"run 2: p \n    TestMain: no kubelet\n")
}

// failedReport is the report of runs that failed, which must hold each of
// wants.
func failedReport(t *testing.T, rs []map[string]result, wants ...string) string {
	t.Helper()
	var b strings.Builder
	if !report(&b, rs) {
		t.Fatalf("no failure reported:\n%s", b.String())
	}
	got := b.String()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	return got
}

func TestReportAllPassed(t *testing.T) {
	var b strings.Builder
	if report(&b, runs(t, "run TestA\npass TestA\npass -")) {
		t.Fatalf("a failure reported:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "no failure in 1 runs") {
		t.Fatal(b.String())
	}
}

// A run's output is held no further than the first lines a failure
// prints, whatever its length and whether the test passed.
func TestReadRunHoldsTheFirstLinesAlone(t *testing.T) {
	var spec strings.Builder
	spec.WriteString("run TestA\n")
	for i := range 1000 {
		fmt.Fprintf(&spec, "output TestA line %d\n", i)
	}
	spec.WriteString("pass TestA\npass -")
	res := runs(t, spec.String())[0]["p TestA"]
	if want := []string{"line 0", "line 1", "line 2"}; !slices.Equal(res.output, want) {
		t.Fatalf("held %d lines, from %q; want %q", len(res.output), res.output[:min(5, len(res.output))], want)
	}
}
