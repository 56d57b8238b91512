package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The ready mark cannot be faked with a stale socket. In Istio's layout
// (a root-owned 0777 emptyDir that the supervisor, uid 1337, cannot make
// sticky) uid 1000 keeps swapping sock/ with the sock/ a SIGKILLed
// supervisor left behind, whose socket file carries the mark, while a new
// supervisor is not ready. wait and exec, as uid 1000 and as root, must
// never take the proxy for ready. (The client read the mark and connected
// by separate path lookups: wait exited 0 in 4-7 of 10 tries, and exec ran
// the app in 1-3 of 5.)
func TestStaleReadyMarkCannotBeSwappedIn(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed")
	}
	p := newPod(t)
	emptyDir(t, p)
	supervise := func(envoyFlags ...string) *proctest.Proc {
		return p.start("supervisor", true, nil, setpriv(1337, append([]string{
			bin.supervisor, "supervise", "--control-dir", p.dir, "--health-addr", "127.0.0.1:15022", "--", bin.envoy}, envoyFlags...)...)...)
	}
	// A supervisor that was ready, killed: its marked socket stays.
	old := supervise()
	p.waitHTTP(readyURL, 200, soon)
	sock := filepath.Join(p.dir, "sock")
	var st unix.Stat_t
	marked := func() bool {
		return unix.Lstat(filepath.Join(sock, "control.sock"), &st) == nil && st.Mode&unix.S_ISVTX != 0
	}
	proctest.Eventually(t, soon, "the ready supervisor's socket marked", marked)
	old.Signal(syscall.SIGKILL)
	old.Exit(soon)
	stale := filepath.Join(p.dir, "stale")
	if err := asUID(1000, func() error { return os.Rename(sock, stale) }); err != nil {
		t.Fatalf("uid 1000 could not move sock/ in the 0777 dir: %v", err)
	}

	// A new supervisor, never ready; uid 1000 swaps the two sock/ dirs
	// without pause.
	sup := supervise("--stay-initializing")
	waitServing(t, p, sup)
	stop := make(chan struct{})
	swapped := make(chan error, 1)
	go func() {
		swapped <- asUID(1000, func() error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				if err := unix.Renameat2(unix.AT_FDCWD, sock, unix.AT_FDCWD, stale, unix.RENAME_EXCHANGE); err != nil {
					return err
				}
			}
		})
	}()
	defer func() {
		close(stop)
		if err := <-swapped; err != nil {
			t.Errorf("uid 1000's swap: %v", err)
		}
	}()

	for i := range 10 {
		env, args := []string(nil), []string{bin.supervisor, "wait", "--timeout", "300ms", "--control-dir", p.dir}
		if i%2 == 1 {
			args = setpriv(1000, args...)
		}
		pr := p.start("wait", false, env, args...)
		if code := pr.Exit(soon); code == 0 {
			t.Fatalf("try %d: wait exited 0 with the proxy never ready:\n%s", i, pr.Out.String())
		}
	}
	for i := range 5 {
		marker := filepath.Join(p.dir, "ran")
		pr := p.start("exec", false, nil, bin.supervisor, "exec", "--name", "job", "--timeout", "300ms", "--control-dir", p.dir, "--", "touch", marker)
		pr.Exit(soon)
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("try %d: exec ran the app with the proxy never ready:\n%s", i, pr.Out.String())
		}
		if strings.Contains(pr.Out.String(), "served by uid") {
			t.Fatalf("try %d: a trusted socket refused: %s", i, pr.Out.String())
		}
	}
}
