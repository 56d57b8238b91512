package main

import (
	"strings"
	"testing"
)

// What the log shows: a skip with its reason, a failure whole, a line per
// package with its counts and time, the package's own output; go test's own
// lines, which that line replaces, do not.
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
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t1.3s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":1.3}`,
		`# not json`,
		`{"Action":"skip","Package":"q","Elapsed":0}`,
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
FAIL p 1.30s: 1 passed, 1 skipped, 2 failed
# not json
?    q [no test files]
ok   k 10m40.8s: 0 passed
summary: 1 passed, 2 failed, 1 skipped
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}
