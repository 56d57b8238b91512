package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/cmd/proxy-supervisor/internal/earlysig"
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

// sizeCeiling is what issue 27 holds the release binary to, in bytes, as
// the Makefile builds it (stripped, trimmed paths, no cgo) with the
// toolchain of go.mod: what it links is resident in every pod.
const sizeCeiling = 3_850_402

// buildSupervisor builds the binary into a temp dir with ldflags, as the
// release build does but for them, and returns its path.
func buildSupervisor(t *testing.T, ldflags string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH")
	}
	bin := filepath.Join(t.TempDir(), "proxy-supervisor")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", strings.TrimSpace(earlysig.Entry+" "+ldflags), "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestBinaryUnderItsCeiling(t *testing.T) {
	fi, err := os.Stat(buildSupervisor(t, "-s -w"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > sizeCeiling {
		t.Errorf("the binary is %d bytes, over its ceiling of %d by %d; see what grew with: go tool nm -size -sort size on a build without -s -w", fi.Size(), sizeCeiling, fi.Size()-sizeCeiling)
	}
}

// The supervisor resolves no names (http1.CheckHost): net's resolver and
// the DNS message codec under it were 140 kB of the binary. Any dial or
// listen that takes a string address (net.Dial, net.Listen, a Dialer's
// DialContext) links them again, even for an IP literal; the dials and
// listens take parsed addresses instead. go list -deps cannot tell, since
// net imports dnsmessage either way: the linker's symbols can.
func TestBinaryLinksNoResolver(t *testing.T) {
	_, syms := binarySymbols(t)
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "net.(*Resolver).") || strings.HasPrefix(s.Name, "vendor/golang.org/x/net/dns/dnsmessage.(*") {
			t.Fatalf("the binary links %s; find the resolving dial or listen with: go build -ldflags=-dumpdep ./cmd/proxy-supervisor 2>&1 | grep -E -- '-> net\\.(Dial|DialTimeout|Listen|ListenPacket|\\(\\*Dialer\\)\\.(Dial|DialContext)|\\(\\*ListenConfig\\)\\.Listen)$'", s.Name)
		}
	}
}

// Package sort (with reflectlite's swapper) was 16 kB of the binary for
// four sorts of a few items each; the sorts left are slices.Sort's of
// []string, which the binary links anyway (slices.Sorted of map keys).
func TestBinaryLinksNoSort(t *testing.T) {
	_, syms := binarySymbols(t)
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "sort.") {
			t.Fatalf("the binary links %s; find the caller with: go build -ldflags=-dumpdep ./cmd/proxy-supervisor 2>&1 | grep -- '-> sort\\.'", s.Name)
		}
	}
}

// binarySymbols builds the binary unstripped and returns its ELF entry
// and its symbols.
func binarySymbols(t *testing.T) (uint64, []elf.Symbol) {
	t.Helper()
	f, err := elf.Open(buildSupervisor(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	return f.Entry, syms
}

// The binary starts at the signal guard (earlysig/entry.go), as the
// Makefile and images/ build it, on each architecture it ships for: the
// ELF entry is the guard's symbol, not the runtime's _rt0.
func TestBinaryEntersAtTheGuard(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			t.Setenv("GOARCH", arch)
			t.Setenv("GOOS", "linux")
			entry, syms := binarySymbols(t)
			for _, s := range syms {
				if s.Name == "proxy_supervisor_entry" {
					if s.Value != entry {
						t.Fatalf("the ELF entry is %#x, the guard is at %#x", entry, s.Value)
					}
					return
				}
			}
			t.Fatal("the binary has no proxy_supervisor_entry symbol")
		})
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
