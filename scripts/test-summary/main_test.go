package main

import (
	"strings"
	"testing"
)

// What the log shows: a skip with its reason, a failure whole, a line per
// package with its counts, time and peaks (scripts/budget's line, which it
// replaces), the package's own output; go test's own lines, which that
// line replaces, do not.
func TestSummary(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"output","Package":"p","Output":"kubelettest: node up\n"}`,
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: needs root\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestA","Elapsed":0}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: quiet\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestB","Elapsed":0.5}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:7: got 2, want 3\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestC","Elapsed":1.25}`,
		`{"Action":"run","Package":"p","Test":"TestD"}`,
		`{"Action":"output","Package":"p","Test":"TestD","Output":"panic: test timed out after 3s\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"p","Test":"TestD","Output":"budget: peak memory 301.2MiB of 4GiB, disk 12MiB of 1GiB\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t1.3s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":1.3}`,
		`# not json`,
		`{"Action":"skip","Package":"q","Elapsed":0}`,
		`{"Action":"output","Package":"k","Output":"budget: peak memory 1.5GiB of 6GiB, disk 2MiB of 1GiB\n"}`,
		`{"Action":"pass","Package":"k","Elapsed":640.77}`,
	}, "\n")
	var out strings.Builder
	s := newSummary(&out)
	s.read(strings.NewReader(in))
	s.total()
	want := `kubelettest: node up
    SKIP p TestA: a_test.go:9: needs root
--- FAIL p TestC (1.25s)
    c_test.go:7: got 2, want 3
--- FAIL p TestD (did not finish)
panic: test timed out after 3s
FAIL p 1.30s: 1 passed, 1 skipped, 2 failed; peak memory 301.2MiB of 4GiB, disk 12MiB of 1GiB
# not json
?    q [no test files]
ok   k 10m40.8s: 0 passed; peak memory 1.5GiB of 6GiB, disk 2MiB of 1GiB
summary: 1 passed, 2 failed, 1 skipped; peak memory 1.5GiB of 6GiB (k), disk 12MiB of 1GiB (p)
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

// A test's output past twice keep is held as its first and last lines
// around one that says what was cut; under it, whole.
func TestOutputKeepsItsHeadAndTail(t *testing.T) {
	var o output
	line := strings.Repeat("x", 1023) + "\n"
	n := 3 * keep / len(line)
	for i := range n {
		if i == 0 {
			o.add("first\n")
		}
		o.add(line)
	}
	o.add("last\n")
	got := o.String()
	if o.cut == 0 || !strings.HasPrefix(got, "first\n") || !strings.HasSuffix(got, line+"last\n") ||
		!strings.Contains(got, "\n[test-summary: ") || len(got) > 2*keep+len(line)+100 {
		t.Fatalf("%d bytes, %d lines cut, from %.20q to %.20q", len(got), o.cut, got, got[len(got)-20:])
	}
	if kept := o.headN + o.tailN; kept+o.cutN != len("first\n")+n*len(line)+len("last\n") {
		t.Errorf("%d bytes kept and %d cut, want all %d", kept, o.cutN, len("first\n")+n*len(line)+len("last\n"))
	}
	var small output
	small.add("a\n")
	small.add("b\n")
	if got := small.String(); got != "a\nb\n" {
		t.Errorf("a small output: %q", got)
	}
}
