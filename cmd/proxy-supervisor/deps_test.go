package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The binary is resident in every pod that runs it, and paged in at the
// start of every client command (exec, complete, wait): what it imports is
// memory and latency. net/http would bring crypto/tls and x509 with it (3.7 MB
// of the 7.5 MB it weighed); internal/http1 speaks the plain HTTP/1.1 that
// the supervisor needs instead, and its query codec stands in for net/url
// (6 kB of symbols, for query strings alone). This keeps them out.
func TestBinaryLeavesOutHeavyPackages(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, heavy := range []string{"net/http", "net/url", "crypto/tls", "crypto/x509", "regexp"} {
		if slices.Contains(deps, heavy) {
			t.Errorf("proxy-supervisor imports %s; find who with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/proxy-supervisor | grep -w %s", heavy, heavy)
		}
	}
}

// earlysig subscribes the signals before any other of the project's code
// runs because Go initialises, among the packages whose imports are done,
// the one whose import path sorts first: it must import nothing of the
// project, and sort before every other package of it that the binary
// links (main, which imports it, comes after it whatever its path).
func TestEarlysigIsInitialisedFirst(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH")
	}
	const module = "github.com/proxy-supervisor/proxy-supervisor/"
	const early = module + "cmd/proxy-supervisor/internal/earlysig"
	list := func(pkg string) []string {
		out, err := exec.Command(goBin, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		var ours []string
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, module) {
				ours = append(ours, p)
			}
		}
		return ours
	}
	if deps := list(early); len(deps) != 1 {
		t.Errorf("%s imports the project's %v: its init would wait for theirs", early, deps[:len(deps)-1])
	}
	for _, p := range list(".") {
		if p < early && p != module+"cmd/proxy-supervisor" {
			t.Errorf("%s sorts before %s: its init may run first", p, early)
		}
	}
}
