package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// tinyVolume mounts a tmpfs of the given size over the pod's volume in a
// private mount namespace, held open by a sleeping process for the test's
// life, and returns the argv prefix that runs a command in that namespace.
// The mount lives only in the namespace, so it is gone with the holder:
// nothing is left mounted on the host.
func tinyVolume(t *testing.T, p *pod, size string) []string {
	t.Helper()
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size=`+size+`,mode=0777 tmpfs "$0" && echo mounted && exec sleep infinity`, p.dir)
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "mounted\n" {
			t.Fatalf("tmpfs not mounted: %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tmpfs not mounted within 5s")
	}
	return proctest.Nsenter(holder.Process.Pid, []string{"mount"})
}

// readOnly is the argv prefix that runs a command with the pod's volume
// mounted read-only, as an app container with a readOnly volumeMount sees
// it. The bind mount lives in the command's own mount namespace.
func readOnly(p *pod) []string {
	return []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind -o ro "$0" "$0" && exec "$@"`, p.dir}
}

// superviseIn starts the supervisor as PID 1 with argv prefixed by in.
func (p *pod) superviseIn(in []string, flags ...string) *proctest.Proc {
	p.t.Helper()
	argv := append(append([]string{}, in...), bin.supervisor, "supervise", "--control-dir", p.dir, "--health-addr", "127.0.0.1:15022")
	argv = append(append(argv, flags...), "--", bin.envoy)
	return p.start("supervisor", true, nil, argv...)
}

// execIn runs `proxy-supervisor exec` of a shell script with argv prefixed
// by in, as an app container's entrypoint.
func (p *pod) execIn(in []string, name, script string) *proctest.Proc {
	p.t.Helper()
	argv := append(append([]string{}, in...), bin.supervisor, "exec", "--control-dir", p.dir, "--name", name, "--", "/bin/sh", "-c", script)
	return p.start("app "+name, true, nil, argv...)
}

// fill is a shell command that fills the volume.
func fill(p *pod) string {
	return fmt.Sprintf(`cat /dev/zero 2>/dev/null > %s/fill || true;`, p.dir)
}

// An app whose volume fills while it runs cannot write its final record:
// exec must still report its code over the socket, while it still holds
// the running record's lock (released first, the lock would count the run
// lost, 137, before the report arrives).
func TestExecReportsOverSocketWhenVolumeFull(t *testing.T) {
	for _, code := range []int{0, 3} {
		t.Run(fmt.Sprint("exit ", code), func(t *testing.T) {
			p := newPod(t)
			vol := tinyVolume(t, p, "256k")
			sup := p.superviseIn(vol)
			app := p.execIn(vol, "job", fmt.Sprintf("%s echo filled; exit %d", fill(p), code))
			if got := app.Exit(soon); got != code {
				t.Fatalf("exec exit %d, want the app's %d", got, code)
			}
			if got := sup.Exit(soon); got != code {
				t.Fatalf("supervisor exit %d, want the app's %d", got, code)
			}
			out := app.Out.String()
			if !strings.Contains(out, "filled") || !strings.Contains(out, "no space left on device") || !strings.Contains(out, "over the socket") {
				t.Fatalf("exec did not say what happened:\n%s", out)
			}
		})
	}
}

// complete on a full volume reports over the socket, and exits 0 once the
// supervisor has taken it.
func TestCompleteReportsOverSocketWhenVolumeFull(t *testing.T) {
	p := newPod(t)
	vol := tinyVolume(t, p, "256k")
	sup := p.superviseIn(vol)
	p.waitHTTP(readyURL, 200, soon)
	fillCmd := append(append([]string{}, vol...), "sh", "-c", fill(p))
	if b, err := exec.Command(fillCmd[0], fillCmd[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("fill: %v %s", err, b)
	}
	argv := append(append([]string{}, vol...), bin.supervisor, "complete", "--control-dir", p.dir, "--name", "app", "--exit-code", "4")
	c := p.start("complete", false, nil, argv...)
	if got := c.Exit(soon); got != 0 {
		t.Fatalf("complete exit %d, want 0:\n%s", got, c.Out.String())
	}
	if out := c.Out.String(); !strings.Contains(out, "no space left on device") || !strings.Contains(out, "over the socket") {
		t.Fatalf("complete did not say what happened:\n%s", out)
	}
	if got := sup.Exit(soon); got != 4 {
		t.Fatalf("supervisor exit %d, want 4", got)
	}
}

// With neither a record nor a supervisor, complete fails after --timeout
// and says that the completion is lost.
func TestCompleteFailsWhenNeitherRecordNorSocket(t *testing.T) {
	p := newPod(t)
	vol := tinyVolume(t, p, "64k")
	setup := append(append([]string{}, vol...), "sh", "-c", fmt.Sprintf("mkdir -m 1777 %s/peers && %s true", p.dir, fill(p)))
	if b, err := exec.Command(setup[0], setup[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("setup: %v %s", err, b)
	}
	argv := append(append([]string{}, vol...), bin.supervisor, "complete", "--control-dir", p.dir, "--timeout", "1s")
	c := p.start("complete", false, nil, argv...)
	if got := c.Exit(soon); got != 1 {
		t.Fatalf("complete exit %d, want 1:\n%s", got, c.Out.String())
	}
	if out := c.Out.String(); !strings.Contains(out, "lost") || !strings.Contains(out, "no space left on device") {
		t.Fatalf("complete did not say the completion is lost:\n%s", out)
	}
}

// An app container that mounts the volume read-only cannot mark itself
// running: exec runs the app anyway, says so, reports over the socket and
// exits with the app's code.
func TestExecRunsWithReadOnlyControlDir(t *testing.T) {
	p := newPod(t)
	sup := p.supervise(nil)
	marker := filepath.Join(t.TempDir(), "ran")
	app := p.execIn(readOnly(p), "job", "touch "+marker+"; exit 5")
	if got := app.Exit(soon); got != 5 {
		t.Fatalf("exec exit %d, want the app's 5:\n%s", got, app.Out.String())
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the app never ran:\n%s", app.Out.String())
	}
	if got := sup.Exit(soon); got != 5 {
		t.Fatalf("supervisor exit %d, want 5", got)
	}
	out := app.Out.String()
	if !strings.Contains(out, "read-only file system") || !strings.Contains(out, "lock") || !strings.Contains(out, "over the socket") {
		t.Fatalf("exec did not say what happened:\n%s", out)
	}
}

// A client refused by the supervisor (here: its uid is not allowed) exits
// at once with the supervisor's error, and the supervisor logs one warning
// per request, not one per 10 ms retry.
func TestRefusedClientGivesUpAtOnce(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--allowed-uids", "4242"})
	p.waitHTTP(readyURL, 200, soon)
	for _, args := range [][]string{
		{"wait", "--control-dir", p.dir, "--timeout", "30s"},
		{"exec", "--control-dir", p.dir, "--timeout", "30s", "--", "true"},
	} {
		start := time.Now()
		code, out := p.client(soon, nil, args...)
		took := time.Since(start)
		if code == 0 || took > 3*time.Second || !strings.Contains(out, "uid 0 is not in --allowed-uids") {
			t.Fatalf("%s: exit %d after %v, want non-zero at once with the error:\n%s", args[0], code, took, out)
		}
		t.Logf("%s: exit %d after %v", args[0], code, took.Round(time.Millisecond))
	}
	n := strings.Count(sup.Out.String(), "refused a client")
	if n > 3 {
		t.Fatalf("the supervisor logged %d refusals for 3 requests", n)
	}
	t.Logf("the supervisor logged %d refusals", n)
}

// When neither the record nor a supervisor takes exec's report, exec asks
// again until --timeout, says the completion is lost, and still exits with
// the app's code; SIGTERM ends that wait at once.
func TestExecLostReportEndsOnSigterm(t *testing.T) {
	p := newPod(t)
	vol := tinyVolume(t, p, "256k")
	sup := p.superviseIn(vol)
	gate := filepath.Join(t.TempDir(), "go")
	app := p.execIn(vol, "job", fmt.Sprintf("%s echo filled; while [ ! -e %s ]; do sleep 0.02; done; exit 7", fill(p), gate))
	app.WaitLog("filled", soon)
	sup.Signal(syscall.SIGKILL) // PID 1 of its namespace: the fake Envoy dies with it
	sup.Exit(soon)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	app.WaitLog("asking again", soon)
	if app.Wait(300 * time.Millisecond) {
		t.Fatalf("exec gave up at once (exit %d) instead of waiting for a supervisor", app.Code())
	}
	start := time.Now()
	app.Signal(syscall.SIGTERM)
	if got := app.Exit(2 * time.Second); got != 7 {
		t.Fatalf("exec exit %d, want the app's 7", got)
	}
	t.Logf("exec ended %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(app.Out.String(), "is lost") {
		t.Fatalf("exec did not say the completion is lost:\n%s", app.Out.String())
	}
}
