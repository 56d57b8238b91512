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

// The project's binaries, as module-relative package paths for Build.
const (
	Supervisor = "cmd/proxy-supervisor"
	FakeEnvoy  = "cmd/fake-envoy"
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
	args := []string{"build", "-trimpath"}
	env := append(os.Environ(), "CGO_ENABLED=0")
	if Race {
		// The race runtime needs cgo.
		args = append(args, "-race")
		env = append(env, "CGO_ENABLED=1")
	}
	for _, pkg := range pkgs {
		// One directory for all, named as the packages are: tests find
		// one binary beside another.
		out := filepath.Join(builds.dir, path.Base(pkg))
		cmd := exec.Command("go", append(args, "-o", out, "./"+pkg)...)
		cmd.Dir, cmd.Env = root, env
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("proctest: go build %s: %v\n%s", pkg, err, b)
		}
		builds.bins[pkg] = out
	}
	return nil
}

// moduleRoot is the nearest directory above the working directory (the
// test's package) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("proctest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("proctest: no go.mod above the working directory")
		}
		dir = parent
	}
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
