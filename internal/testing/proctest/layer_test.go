package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	t.Parallel()
	n := 0
	if err := Poll(10*time.Second, func() error {
		if n++; n < 3 {
			return fmt.Errorf("try %d", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("Poll gave up on a check that passed: %v", err)
	}
	// The reason given is the last one, not the first.
	n = 0
	err := Poll(50*time.Millisecond, func() error { n++; return fmt.Errorf("try %d", n) })
	if err == nil || err.Error() != fmt.Sprintf("try %d", n) {
		t.Fatalf("Poll returned %v after %d tries, want the last reason", err, n)
	}
}

// A socket made by Netns.Do is the namespace's: a listener there is out of
// the test's own namespace's reach, and in reach of Netns.Dial.
func TestNetns(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	holder := exec.Command("sleep", "infinity")
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	pr := Start(t, "holder", holder)
	ns := NetnsOf(pr.Pid())
	up := Nsenter(pr.Pid(), []string{"net"}, "ip", "link", "set", "lo", "up")
	if b, err := exec.Command(up[0], up[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", up, err, b)
	}
	ln, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		// The port may be taken here too by chance; then it must not be
		// the namespace's listener that answered.
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			t.Fatalf("%s answered from the test's namespace", addr)
		}
	}
	c, err := ns.Dial(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial in the namespace: %v", err)
	}
	c.Close()
	// The thread that ran Do is back in the test's namespace.
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := ns.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
	for _, task := range tasks {
		if l, err := os.Readlink(task); err == nil && l != self {
			t.Errorf("%s is in %s after Do, not %s", task, l, self)
		}
	}
	if err := Netns("/nonexistent").Do(func() error { return errors.New("ran") }); err == nil || strings.Contains(err.Error(), "ran") {
		t.Errorf("Do in a namespace that does not exist: %v", err)
	}
}

func TestNsenter(t *testing.T) {
	t.Parallel()
	got := strings.Join(Nsenter(42, []string{"mount", "net"}, "ip", "a"), " ")
	if want := "nsenter --target 42 --mount --net -- ip a"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// A nested test module (deploytest, kubelettest) builds the main module's
// binaries: the root is the go.mod that declares the main module, not the
// nearest one.
func TestModuleRootFromANestedModule(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	nested := filepath.Join(root, "kubelettest")
	if _, err := os.Stat(filepath.Join(nested, "go.mod")); err != nil {
		t.Skipf("no nested module: %v", err)
	}
	t.Chdir(nested)
	got, err := moduleRoot()
	if err != nil || got != root {
		t.Fatalf("moduleRoot from %s: %q, %v; want %q", nested, got, err, root)
	}
}

// A package of a nested module is built in that module: the fake Envoy in
// e2e's, the supervisor in the root's.
func TestPackageModule(t *testing.T) {
	t.Parallel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ pkg, dir, rel string }{
		{Supervisor, root, "./cmd/proxy-supervisor"},
		{FakeEnvoy, filepath.Join(root, "e2e"), "./cmd/fake-envoy"},
	} {
		if dir, rel := packageModule(root, tt.pkg); dir != tt.dir || rel != tt.rel {
			t.Errorf("packageModule(%s) = %s, %s; want %s, %s", tt.pkg, dir, rel, tt.dir, tt.rel)
		}
	}
}
