package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// asUID runs fn on a thread of its own whose uid, gid and groups are uid's
// alone, as another container of the pod would be; root's capabilities go
// with the uid. Credentials are per thread in the kernel, so the raw calls
// change only this one, which is never unlocked and dies with its goroutine
// (threads the runtime starts meanwhile come from its clean template
// thread).
func asUID(uid int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		for _, c := range [][4]uintptr{
			{unix.SYS_SETGROUPS, 0, 0, 0},
			{unix.SYS_SETRESGID, uintptr(uid), uintptr(uid), uintptr(uid)},
			{unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)},
		} {
			if _, _, e := unix.RawSyscall(c[0], c[1], c[2], c[3]); e != 0 {
				errc <- fmt.Errorf("become uid %d: %w", uid, e)
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
}

// emptyDir gives the pod's volume an emptyDir's mode: root's, 0777, not
// sticky, and reachable by every uid; and lets every uid run the binaries,
// as the containers of other uids in a pod do.
func emptyDir(t testing.TB, p *pod) {
	t.Helper()
	for path, mode := range map[string]os.FileMode{filepath.Dir(p.dir): 0o755, p.dir: 0o777, filepath.Dir(bin.supervisor): 0o755} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// setpriv is argv run as uid (its gid the same, no other groups), as in a
// container of that uid.
func setpriv(uid int, argv ...string) []string {
	id := strconv.Itoa(uid)
	return append([]string{"setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups", "--"}, argv...)
}

// istioPod is a pod laid out as Istio's: the emptyDir root's, 0777 and
// not sticky, and the supervisor uid 1337 without capabilities, so that it
// cannot make the control dir sticky. It skips where setpriv is missing.
func istioPod(t *testing.T, flags []string, envoyFlags ...string) (*pod, *proctest.Proc) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed")
	}
	p := newPod(t)
	emptyDir(t, p)
	argv := append([]string{bin.supervisor, "supervise", "--control-dir", p.dir, "--health-addr", "127.0.0.1:15022"}, flags...)
	argv = append(append(argv, "--", bin.envoy), envoyFlags...)
	return p, p.start("supervisor", true, nil, setpriv(1337, argv...)...)
}

// waitServing waits (bounded) until the control socket answers a client of
// this (root) process.
func waitServing(t *testing.T, p *pod, sup *proctest.Proc) {
	t.Helper()
	var err error
	proctest.Until(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = control.NewClient(p.dir).Status(ctx)
		return err == nil || sup.Wait(0)
	})
	switch {
	case err == nil:
	case sup.Wait(0):
		t.Fatalf("supervisor exited (%d) before serving", sup.Code())
	default:
		t.Fatalf("control socket never answered: %v", err)
	}
}

// impostor is what the attack in issue 9 did as uid 1000: move the
// supervisor's socket out of the way (its directory, when it has one of its
// own) and serve its own there, which says the proxy is ready and takes
// every completion. It returns the error of the first step that failed.
func impostor(t *testing.T, dir string) error {
	t.Helper()
	path := control.NewClient(dir).Path()
	var ln net.Listener
	err := asUID(1000, func() error {
		if sd := filepath.Dir(path); sd != filepath.Clean(dir) {
			if err := os.Rename(sd, filepath.Join(dir, ".stolen")); err != nil {
				return err
			}
			if err := os.Mkdir(sd, 0o755); err != nil {
				return err
			}
		} else if err := os.Remove(path); err != nil {
			return err
		}
		var err error
		if ln, err = net.Listen("unix", path); err != nil { // the kernel notes uid 1000 here
			return err
		}
		return os.Chmod(path, 0o666)
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/complete" {
			w.WriteHeader(http.StatusAccepted)
		}
		fmt.Fprintln(w, `{"ready":true,"drained":true,"recorded":true}`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return nil
}

// Under Istio the supervisor is uid 1337 without capabilities and cannot
// make the root-owned emptyDir sticky, so uid 1000 can rename the socket's
// directory away and serve its own. Clients must tell: a root wait or exec
// must refuse the impostor, naming its uid, and never run the app. The
// default trust (uid 1337) keeps a real Istio pod working unconfigured.
func TestSocketImpostorIsRefused(t *testing.T) {
	p, sup := istioPod(t, nil, "--stay-initializing")
	waitServing(t, p, sup)

	if err := impostor(t, p.dir); err != nil {
		t.Fatalf("uid 1000 could not replace the socket of uid 1337 in a 0777 dir: %v", err)
	}
	code, out := p.client(10*time.Second, nil, "wait", "--timeout", "3s", "--control-dir", p.dir)
	if code == 0 || !strings.Contains(out, "served by uid 1000") {
		t.Fatalf("root wait against uid 1000's socket: exit %d, %q; want a refusal naming uid 1000", code, out)
	}
	t.Logf("wait: exit %d: %s", code, out)
	marker := filepath.Join(t.TempDir(), "ran")
	code, out = p.client(10*time.Second, nil, "exec", "--name", "job", "--timeout", "3s", "--control-dir", p.dir, "--", "touch", marker)
	if _, err := os.Stat(marker); err == nil || code == 0 {
		t.Fatalf("exec ran the app through uid 1000's socket: exit %d, %q", code, out)
	}
	// Trusting that uid is an explicit choice, and then it is obeyed.
	code, out = p.client(10*time.Second, []string{"PROXY_SUPERVISOR_SUPERVISOR_UID=1000"}, "wait", "--timeout", "3s", "--control-dir", p.dir)
	if code != 0 {
		t.Fatalf("wait trusting uid 1000: exit %d, %q", code, out)
	}
}

// A root supervisor makes the emptyDir sticky, so uid 1000 cannot move its
// socket or the socket's directory at all: the attack of issue 9 (with
// --allowed-uids 0, uid 1000 replaced control.sock and a root wait then
// returned 0 with the proxy never ready) fails, and wait answers truly.
func TestSocketCannotBeReplacedUnderRoot(t *testing.T) {
	p := newPod(t)
	emptyDir(t, p)
	sup := p.supervise([]string{"--allowed-uids", "0"}, "--stay-initializing")
	waitServing(t, p, sup)
	if fi, err := os.Stat(p.dir); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("control dir not made sticky: %v %v", fi.Mode(), err)
	}
	err := impostor(t, p.dir)
	if !errors.Is(err, os.ErrPermission) {
		t.Fatalf("uid 1000 replacing the root supervisor's socket: %v; want a permission error", err)
	}
	code, out := p.client(10*time.Second, nil, "wait", "--timeout", "2s", "--control-dir", p.dir)
	if code == 0 || !strings.Contains(out, "not ready") {
		t.Fatalf("root wait with the proxy never ready: exit %d, %q", code, out)
	}
}
