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
