// Command flakes reads the `go test -json` output of several runs of the
// same tests, one file a run, and prints each test's pass rate and, for
// every failure, its run and the first lines it printed. scripts/flakes.sh
// makes the runs; a test that passes in some runs and fails in others is a
// flake.
//
//	go run ./scripts/flakes RUN1.json RUN2.json ...
//
// A test that a run started and never ended (go test's -timeout, or a panic
// elsewhere in its binary) counts as failed in that run. A package that
// failed without a failed test (a build error, a TestMain that gave up) is
// listed as its own line. It exits 1 when any run failed.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/proxy-supervisor/proxy-supervisor/scripts/internal/testjson"
)

// firstLines is how many lines of a failure's output are printed.
const firstLines = 3

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: flakes RUN.json...")
		os.Exit(2)
	}
	var runs []map[string]result
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flakes:", err)
			os.Exit(2)
		}
		r, err := readRun(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "flakes: %s: %v\n", path, err)
			os.Exit(2)
		}
		runs = append(runs, r)
	}
	if report(os.Stdout, runs) {
		os.Exit(1)
	}
}

// result is how one test (or a package, Test "") ended in one run, with
// the first lines it printed.
type result struct {
	action string // pass, fail or skip; "" while it runs
	// output is no more than firstOf prints: the runs' output, of every
	// test, passed or not, can be anything up to GBs (a test that logs
	// every poll of a fault until its deadline).
	output []string
}

// readRun reads one run's events into each test's result, keyed
// "PACKAGE TEST" (a package's own: "PACKAGE "). Lines that are not
// test2json's are left out.
func readRun(r io.Reader) (map[string]result, error) {
	out := map[string]result{}
	err := testjson.Read(r, func(e testjson.Event) {
		key := e.Package + " " + e.Test
		res := out[key]
		switch e.Action {
		case "run":
			res.action = ""
		case "output", "build-output":
			if l := strings.TrimRight(e.Output, "\n"); len(res.output) < firstLines && !framing(l) {
				res.output = append(res.output, l)
			}
		case "pass", "fail", "skip":
			res.action = e.Action
		default:
			return
		}
		out[key] = res
	}, func([]byte) {})
	if err != nil {
		return nil, err
	}
	// A package that failed leaves the tests it was running unfinished.
	for key, res := range out {
		pkg, test, _ := strings.Cut(key, " ")
		if test != "" && res.action == "" && out[pkg+" "].action == "fail" {
			res.action = "fail"
			res.output = append(res.output, "(did not finish: the package ended under it)")
			out[key] = res
		}
	}
	return out, nil
}

// report prints every test's pass rate over the runs, then each failure's
// first lines, and says whether any run failed.
func report(w io.Writer, runs []map[string]result) (failed bool) {
	var keys []string
	for _, r := range runs {
		for key := range r {
			if !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
	}
	slices.Sort(keys)
	type failure struct {
		run       int
		lines     []string
		explained bool // by a failure under it (explained)
	}
	failures := map[string][]failure{}
	fmt.Fprintf(w, "%-8s %-6s %s\n", "passed", "rate", "test")
	for _, key := range keys {
		pkg, test, _ := strings.Cut(key, " ")
		var pass, ran, skip int
		for i, r := range runs {
			res, ok := r[key]
			if !ok {
				continue
			}
			switch res.action {
			case "skip":
				skip++
				continue
			case "pass":
				pass++
			case "fail":
				failures[key] = append(failures[key], failure{i + 1, firstOf(res.output), explained(key, r)})
			default: // a package still running when the file ended
				continue
			}
			ran++
		}
		// A package's own line matters only when it failed without a
		// failed test to show for it.
		if test == "" && (ran == pass || !slices.ContainsFunc(failures[key], func(f failure) bool { return !f.explained })) {
			continue
		}
		name := pkg + " " + test
		if test == "" {
			name = pkg + " (the package itself)"
		}
		if ran == 0 {
			fmt.Fprintf(w, "%-8s %-6s %s (skipped %d)\n", "-", "-", name, skip)
			continue
		}
		line := fmt.Sprintf("%-8s %-6s %s", fmt.Sprintf("%d/%d", pass, ran), fmt.Sprintf("%.0f%%", 100*float64(pass)/float64(ran)), name)
		if skip > 0 {
			line += fmt.Sprintf(" (skipped %d)", skip)
		}
		fmt.Fprintln(w, line)
	}
	if len(failures) == 0 {
		fmt.Fprintf(w, "\nno failure in %d runs\n", len(runs))
		return false
	}
	fmt.Fprintln(w, "\nfailures, with their first lines:")
	for _, key := range keys {
		for _, f := range failures[key] {
			if f.explained {
				continue
			}
			pkg, test, _ := strings.Cut(key, " ")
			fmt.Fprintf(w, "run %d: %s %s\n", f.run, pkg, test)
			for _, l := range f.lines {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}
	return true
}

// explained says whether a failure of key (a package's, or a test's) in
// run r is explained by a failure under it: one of the package's tests, or
// one of the test's subtests, whose own lines say why.
func explained(key string, r map[string]result) bool {
	pkg, test, _ := strings.Cut(key, " ")
	for k, res := range r {
		p, t, _ := strings.Cut(k, " ")
		if res.action == "fail" && p == pkg && t != test && (test == "" || strings.HasPrefix(t, test+"/")) {
			return true
		}
	}
	return false
}

// firstOf is a failure's first lines, without go test's framing (=== RUN,
// --- FAIL and the like).
func firstOf(output []string) []string {
	var out []string
	for _, l := range output {
		if framing(l) {
			continue
		}
		out = append(out, strings.TrimSpace(l))
		if len(out) == firstLines {
			break
		}
	}
	return out
}

// framing says whether l is go test's framing, or blank.
func framing(l string) bool {
	t := strings.TrimSpace(l)
	return t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") || t == "FAIL" || t == "PASS" ||
		strings.HasPrefix(t, "FAIL\t") || strings.HasPrefix(t, "ok  \t")
}
