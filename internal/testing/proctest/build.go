package proctest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The project's binaries, as package paths relative to the repository's
// root for Build; each is built in its own module (the fake Envoy in the
// test module, e2e/).
const (
	Supervisor = "cmd/proxy-supervisor"
	FakeEnvoy  = "e2e/cmd/fake-envoy"
	Storm      = "scripts/storm"
)

// builds is the one place the binaries of this test binary are kept: it is
// package state because "once per test binary" is the point, and Main
// removes it when the tests end.
var builds struct {
	mu   sync.Mutex
	main bool              // Main runs the tests
	dir  string            // where the binaries are, made on first use
	bins map[string]string // package path to binary
	errs map[string]error  // package path to its failed build, not retried
}

// Main runs m's tests, with setup (which may be nil) run first, and removes
// what Build made once they end. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(proctest.Main(m, nil)) }
func Main(m *testing.M, setup func() error) int {
	builds.mu.Lock()
	builds.main = true
	builds.mu.Unlock()
	defer func() {
		builds.mu.Lock()
		defer builds.mu.Unlock()
		if builds.dir != "" {
			os.RemoveAll(builds.dir)
		}
	}()
	if setup != nil {
		if err := setup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// Build returns the binary of the module's package pkg (for example
// FakeEnvoy), built on first use; the test fails if it does not build.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	bins, err := Binaries(pkg)
	if err != nil {
		tb.Fatal(err)
	}
	return bins[0]
}

// Binaries is Build for TestMain, which has no testing.TB: it builds those
// of pkgs not built yet and returns every binary's path in
// the order of pkgs. A test binary must run its tests with Main to use it.
func Binaries(pkgs ...string) ([]string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if !builds.main {
		return nil, errors.New("proctest: build: the test binary's TestMain must run the tests with proctest.Main")
	}
	var todo []string
	for _, pkg := range pkgs {
		if err := builds.errs[pkg]; err != nil {
			return nil, err
		}
		if builds.bins[pkg] == "" {
			todo = append(todo, pkg)
		}
	}
	if len(todo) > 0 {
		if err := build(todo); err != nil {
			for _, pkg := range todo {
				builds.errs[pkg] = err
			}
			return nil, err
		}
	}
	out := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		out[i] = builds.bins[pkg]
	}
	return out, nil
}

// build runs go build for pkgs; the caller holds builds.mu.
func build(pkgs []string) error {
	if builds.bins == nil {
		builds.bins, builds.errs = make(map[string]string), make(map[string]error)
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if builds.dir == "" {
		if builds.dir, err = os.MkdirTemp("", "proctest-bin-"); err != nil {
			return fmt.Errorf("proctest: build: %w", err)
		}
		// Tests run the binaries as other uids too (the proxy's 1337).
		if err := os.Chmod(builds.dir, 0o755); err != nil {
			return fmt.Errorf("proctest: build: %w", err)
		}
	}
	// The sources are read by the compiler, in another process, so go
	// test's cache would not know this test depends on them: a test
	// result would be reused after a change to a binary. Touching them
	// from here records them.
	touchSources(root)
	var flags []string
	if Race {
		flags = []string{"-race"}
	}
	for _, pkg := range pkgs {
		// One directory for all, named as the packages are: tests find
		// one binary beside another.
		out := filepath.Join(builds.dir, path.Base(pkg))
		dir, rel := packageModule(root, pkg)
		var env []string
		if Race {
			env = raceEnv
		}
		if err := goBuild(dir, out, env, append(append(flags, linkFlags(pkg)...), rel)...); err != nil {
			return err
		}
		builds.bins[pkg] = out
	}
	return nil
}

// Static builds the repository's package pkg (for example Supervisor) into
// out as the release does, static and without the race detector whatever
// the test binary runs under: for a binary that goes into an image.
func Static(pkg, out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	touchSources(root)
	dir, rel := packageModule(root, pkg)
	return goBuild(dir, out, nil, append(linkFlags(pkg), rel)...)
}

// StaticFor is Static for another architecture (GOARCH goarch): the
// binary of a multi-arch image's other platforms.
func StaticFor(pkg, out, goarch string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	touchSources(root)
	dir, rel := packageModule(root, pkg)
	return goBuild(dir, out, []string{"GOARCH=" + goarch}, append(linkFlags(pkg), rel)...)
}

// supervisorEntry is the linker flag every build of the supervisor passes,
// as the Makefile and images/ do: the binary starts at the signal guard
// (cmd/proxy-supervisor/internal/earlysig's Entry, which this repeats
// because that package is internal to the command).
const supervisorEntry = "-ldflags=-E=proxy_supervisor_entry"

// linkFlags are the go build flags that pkg's shipped binary is built with.
func linkFlags(pkg string) []string {
	if pkg == Supervisor {
		return []string{supervisorEntry}
	}
	return nil
}

// packageModule is the directory of the module that holds the package at
// pkg under root (the nearest go.mod above it) and the package's path
// relative to it, for go build run there.
func packageModule(root, pkg string) (dir, rel string) {
	dir = filepath.Join(root, filepath.FromSlash(pkg))
	for dir != root {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		dir = filepath.Dir(dir)
	}
	r, _ := filepath.Rel(dir, filepath.Join(root, filepath.FromSlash(pkg)))
	return dir, "./" + filepath.ToSlash(r)
}

// GoBuild runs go build -o out with args in dir, static: for a test module
// that builds its own commands, or others' (a kubelet).
func GoBuild(dir, out string, args ...string) error {
	return goBuild(dir, out, nil, args...)
}

// raceEnv is a race build's environment: the race runtime needs cgo.
var raceEnv = []string{"CGO_ENABLED=1"}

// goBuild runs go build -o out with args in dir, static unless env (added
// to the process's, its entries winning) says otherwise.
func goBuild(dir, out string, env []string, args ...string) error {
	args = append([]string{"build", "-trimpath", "-o", out}, args...)
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("proctest: go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// mainModule is the module at the repository's root, whose directory
// Build's package paths are relative to.
const mainModule = "github.com/proxy-supervisor/proxy-supervisor"

// moduleRoot is the directory of the main module: the nearest one above
// the working directory (the test's package) whose go.mod declares it, so
// that a test module nested in the repository builds the same binaries.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("proctest: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(string(b)) == mainModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("proctest: no go.mod of %s above the working directory", mainModule)
		}
		dir = parent
	}
}

// modulePath is the path a go.mod's module directive declares.
func modulePath(gomod string) string {
	for line := range strings.Lines(gomod) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`)
		}
	}
	return ""
}

func touchSources(root string) {
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if name := d.Name(); strings.HasSuffix(name, ".go") || name == "go.mod" || name == "go.sum" {
			os.Stat(p)
		}
		return nil
	})
}
