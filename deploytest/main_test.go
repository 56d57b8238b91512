package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// root is the repository's root, the main module.
const root = ".."

var (
	// binary is proxy-supervisor built from the main module.
	binary string
	// work holds what the tests build and render once (kubeapi's and
	// istioinject's binaries, the injectors' configs); removed at the end.
	work string
)

func TestMain(m *testing.M) {
	code := proctest.Main(m, func() error {
		var err error
		if work, err = os.MkdirTemp("", "deploytest-"); err != nil {
			return err
		}
		bins, err := proctest.Binaries(proctest.Supervisor)
		if err == nil {
			binary = bins[0]
		}
		return err
	})
	if work != "" {
		os.RemoveAll(work)
	}
	os.Exit(code)
}

// checkCommandLine runs a proxy-supervisor command line (argv[0] is the
// binary's path in the container) with --check added after the command, and
// fails the test with the binary's own error when it does not parse. env is
// the container's literal environment (PROXY_SUPERVISOR_* variables count).
func checkCommandLine(t *testing.T, where string, argv []string, env []string) {
	t.Helper()
	if len(argv) < 2 {
		t.Errorf("%s: %q: no proxy-supervisor command", where, argv)
		return
	}
	args := append([]string{argv[1], "--check"}, argv[2:]...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		t.Errorf("%s: proxy-supervisor %s: %v: %s", where, strings.Join(args, " "), err, out.String())
	}
}

// isProxySupervisor reports whether argv runs the proxy-supervisor binary.
func isProxySupervisor(argv []string) bool {
	return len(argv) > 0 && filepath.Base(argv[0]) == "proxy-supervisor"
}

var programs sync.Map // "dir modfile" → func() (string, error)

// program builds the program in deploytest's subdirectory dir with one of
// its modfiles (kubeapi's and istioinject's one per release) into work,
// once, and returns its path. Stripped: a third less to link and to hold
// on disk (istioinject is Istio's injector).
func program(t *testing.T, dir, modfile string) string {
	t.Helper()
	f, _ := programs.LoadOrStore(dir+" "+modfile, sync.OnceValues(func() (string, error) {
		bin := filepath.Join(work, dir+"-"+strings.TrimSuffix(modfile, ".mod"))
		cmd := exec.Command("go", "build", "-modfile="+modfile, "-ldflags=-s -w", "-o", bin, ".")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s with %s: %v: %s", dir, modfile, err, out)
		}
		return bin, nil
	}))
	bin, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
