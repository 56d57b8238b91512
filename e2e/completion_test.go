package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// app runs `proxy-supervisor exec` in the pod, as an app container's
// entrypoint would.
func (p *pod) app(name string, flags []string, script string) *proctest.Proc {
	argv := append([]string{bin.supervisor, "exec", "--control-dir", p.dir, "--name", name}, flags...)
	argv = append(argv, "--", "/bin/sh", "-c", script)
	return p.start("app "+name, true, nil, argv...)
}

func TestJobSucceeds(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil, "--init-delay", "300ms")
	app := p.app("app", nil, "echo working; exit 0")
	if code := app.Exit(soon); code != 0 {
		t.Fatalf("app exit %d", code)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want 0", code)
	}
	if !strings.Contains(app.Out.String(), "working") {
		t.Fatal("the app never ran")
	}
	// The app must not have run before the proxy was ready.
	out := sup.Out.String()
	ready, done := strings.Index(out, "proxy ready"), strings.Index(out, "peer completed")
	if ready < 0 || done < 0 || ready > done {
		t.Fatal("no readiness before the completion: exec did not wait")
	}
}

func TestJobFailsUnderNever(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil)
	app := p.app("app", nil, "exit 3")
	if code := app.Exit(soon); code != 3 {
		t.Fatalf("app exit %d, want 3", code)
	}
	if code := sup.Exit(soon); code != 3 {
		t.Fatalf("supervisor exit %d, want the app's 3", code)
	}
}

// Under OnFailure the kubelet restarts the failed app in the same pod, and it
// needs the proxy: only a success ends it.
func TestJobFailsUnderOnFailure(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--on-peer-failure", "wait"})
	if code := p.app("app", nil, "exit 3").Exit(soon); code != 3 {
		t.Fatalf("first run exit %d", code)
	}
	sup.WaitLog("keeping the proxy for its restart", soon)
	p.undecided(sup, "a failure under OnFailure")
	p.waitHTTP(readyURL, 200, soon)
	if code := p.app("app", nil, "exit 0").Exit(soon); code != 0 {
		t.Fatalf("second run exit %d", code)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want 0", code)
	}
}

func TestTwoPeers(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--peers", "job,uploader"})
	if code := p.app("job", nil, "exit 0").Exit(soon); code != 0 {
		t.Fatalf("job exit %d", code)
	}
	p.undecided(sup, "one of two peers done")
	// An unknown name is refused, with the reason, and a non-zero exit.
	code, out := p.client(soon, nil, "complete", "--control-dir", p.dir, "--name", "intruder")
	if code == 0 || !strings.Contains(out, "intruder") {
		t.Fatalf("unknown peer: exit %d, %q", code, out)
	}
	if code := p.app("uploader", nil, "exit 0").Exit(soon); code != 0 {
		t.Fatalf("uploader exit %d", code)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d", code)
	}
}

// The app finished before the proxy container (re)started: the supervisor
// exits with the recorded code and never starts the proxy.
func TestCompletionBeforeSupervisor(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	// The supervisor of an earlier run created peers/; none listens now.
	earlier := p.supervise(nil)
	p.waitHTTP(readyURL, 200, soon)
	earlier.Cmd.Process.Signal(syscall.SIGKILL)
	earlier.Exit(soon)

	code, out := p.client(soon, nil, "complete", "--control-dir", p.dir, "--exit-code", "4")
	if code != 0 || !strings.Contains(out, "no supervisor is listening") {
		t.Fatalf("complete without a supervisor: exit %d, %q", code, out)
	}
	sup := p.supervise(nil)
	if code := sup.Exit(soon); code != 4 {
		t.Fatalf("supervisor exit %d, want the recorded 4", code)
	}
	if strings.Contains(sup.Out.String(), "proxy started") {
		t.Fatal("the proxy was started although the records settled the job")
	}
}

// The app finished before the proxy container ever started in this pod:
// complete waits for the supervisor to create peers/, and the job ends.
func TestCompletionBeforeFirstStart(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	c := p.start("complete", false, nil, bin.supervisor, "complete", "--control-dir", p.dir, "--exit-code", "6")
	c.WaitLog("waiting for the supervisor to create", soon)
	sup := p.supervise(nil, "--init-delay", "5s")
	if code := c.Exit(soon); code != 0 {
		t.Fatalf("complete exit %d:\n%s", code, c.Out.String())
	}
	if code := sup.Exit(soon); code != 6 {
		t.Fatalf("supervisor exit %d, want the recorded 6", code)
	}
}

// SIGTERM to exec while it waits for the proxy ends the run with a record
// (signaled, and the stop signal that came), not with a lock released by
// death (lost). The kubelet's stop of the app is a termination's: the
// supervisor waits for its own SIGTERM, which, before the proxy was ever
// ready, decides 143.
func TestExecSignaledWhileWaiting(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil, "--stay-initializing")
	app := p.app("app", nil, "echo must-not-run")
	waitRecord(t, p.dir, "app", `"running":true`)
	// The scenario is a proxy that is starting: a supervisor that reads
	// the record at its own start finds the job settled and starts none.
	sup.WaitLog("proxy started", soon)
	app.Signal(syscall.SIGTERM)
	if code := app.Exit(soon); code != 143 {
		t.Fatalf("exec exit %d, want 143", code)
	}
	if strings.Contains(app.Out.String(), "must-not-run") {
		t.Fatal("exec ran the app")
	}
	waitRecord(t, p.dir, "app", `"reason":"signaled"`)
	waitRecord(t, p.dir, "app", `"stop":{"signal":"SIGTERM"`)
	sup.WaitLog("peer stopped from outside", soon)
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 143 {
		t.Fatalf("supervisor exit %d, want 143 (signal before ready)", code)
	}
}

// On pod deletion the preStop hook comes first, and the app's own SIGTERM
// and the failure it reports must not decide how the proxy exits.
func TestPodDeletionOfAJob(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s"})
	p.waitHTTP(readyURL, 200, soon)
	app := p.app("app", nil, "sleep 100")
	waitRecord(t, p.dir, "app", `"running":true`)
	hook := p.prestop()
	sup.WaitLog(`msg="drain started"`, soon)
	app.Signal(syscall.SIGTERM) // the kubelet, in parallel
	if code := app.Exit(soon); code != 143 {
		t.Fatalf("app exit %d, want 143", code)
	}
	hook.Exit(soon)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want 0 for a deleted pod", code)
	}
}

func TestCompletionWhileProxyStarting(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil, "--init-delay", "30s")
	sup.WaitLog("proxy started", soon)
	code, _ := p.client(soon, nil, "complete", "--control-dir", p.dir)
	if code != 0 {
		t.Fatalf("complete exit %d", code)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want 0", code)
	}
	if strings.Contains(sup.Out.String(), "proxy ready") {
		t.Fatal("the proxy became ready; this test wants a completion before that")
	}
}

// The kubelet kills the app and its exec together (memory.oom.group): no
// final record is written, and the released lock counts as a failure.
func TestAppKilledWithExecIsLost(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil)
	app := p.app("app", nil, "sleep 100")
	waitRecord(t, p.dir, "app", `"running":true`)
	syscall.Kill(-app.Cmd.Process.Pid, syscall.SIGKILL)
	if code := sup.Exit(soon); code != 137 {
		t.Fatalf("supervisor exit %d, want 137 for a lost peer", code)
	}
	if !strings.Contains(sup.Out.String(), "reason=lost") {
		t.Fatal("the loss was not logged as such")
	}
}

func TestExecNotReady(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil, "--stay-initializing")
	app := p.app("app", []string{"--timeout", "1s"}, "echo must-not-run")
	if code := app.Exit(soon); code != 69 {
		t.Fatalf("exec exit %d, want 69", code)
	}
	if strings.Contains(app.Out.String(), "must-not-run") {
		t.Fatal("exec ran the app without a ready proxy")
	}
	if code := sup.Exit(soon); code != 69 {
		t.Fatalf("supervisor exit %d, want 69", code)
	}
	if !strings.Contains(sup.Out.String(), "reason=not-ready") {
		t.Fatal("not-ready reason not recorded")
	}
}

// A final record left by an earlier run of the same container never ends a
// later run: exec marks the record running first.
func TestStaleRecordDoesNotEndALaterRun(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--peers", "job,side"})
	p.waitHTTP(readyURL, 200, soon)
	// The earlier run of job succeeded...
	if code, _ := p.client(soon, nil, "complete", "--control-dir", p.dir, "--name", "job"); code != 0 {
		t.Fatal("complete failed")
	}
	// ...and job runs again (its container restarted) while side finishes.
	// It fails only when the test says so, however long side takes.
	proceed := filepath.Join(p.dir, "proceed")
	app := p.app("job", nil, fmt.Sprintf("until [ -e %s ]; do sleep 0.01; done; exit 5", proceed))
	waitRecord(t, p.dir, "job", `"running":true`)
	if code, _ := p.client(soon, nil, "complete", "--control-dir", p.dir, "--name", "side"); code != 0 {
		t.Fatal("complete failed")
	}
	p.undecided(sup, "side's completion, with job's stale record")
	if st := status(t, p.dir); !st.Peers["job"].Running {
		t.Fatalf("job %+v, want running", st.Peers["job"])
	}
	if err := os.WriteFile(proceed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	app.Exit(soon)
	if code := sup.Exit(soon); code != 5 {
		t.Fatalf("supervisor exit %d, want job's 5", code)
	}
}

func TestCurlOnTheSocket(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	p := newPod(t)
	sup := p.supervise(nil)
	sock := control.SocketPath(p.dir)
	p.waitHTTP(readyURL, 200, soon)
	out, err := exec.Command("curl", "-sS", "--unix-socket", sock, "http://x/v1/ready?wait=5s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"ready":true`) {
		t.Fatalf("curl ready: %v %s", err, out)
	}
	out, _ = exec.Command("curl", "-sS", "-X", "POST", "--unix-socket", sock, "http://x/v1/complete?exit_code=300").CombinedOutput()
	if !strings.Contains(string(out), `"error"`) {
		t.Fatalf("bad exit code: %s", out)
	}
	out, err = exec.Command("curl", "-sS", "-w", "%{http_code}", "-X", "POST", "--unix-socket", sock, "http://x/v1/complete?exit_code=0").CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "202") {
		t.Fatalf("curl complete: %v %s", err, out)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d", code)
	}
	// POST alone: the supervisor wrote the record itself, so it survives.
	if _, err := os.Stat(filepath.Join(p.dir, "peers", ".posted", "app")); err != nil {
		t.Fatalf("no record of the POSTed completion: %v", err)
	}
}

// A thousand peers complete at once, and every completion is taken. Each
// is a record the supervisor writes and syncs, so the last of them waits
// for nearly all the others: under -race beside a CPU hog the thousand
// took 29 to 33 s, and the bound of each is four times that.
func TestThousandConcurrentCompletes(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--peers", "1001"})
	p.waitHTTP(readyURL, 200, soon)
	c := control.NewClient(p.dir)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The supervisor takes them one at a time, each a read of its
			// record: under -race on a busy machine the last waits about
			// half a minute. The bound is for a lost one, not for speed.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := c.Complete(ctx, control.Completion{Peer: fmt.Sprintf("peer-%d", i), Code: 0}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := status(t, p.dir); len(st.Peers) != 1000 || st.Awaiting != 1 {
		t.Fatalf("status: %d peers, awaiting %d; want 1000 and 1", len(st.Peers), st.Awaiting)
	}
	p.undecided(sup, "1000 of 1001 peers")
	ctx, cancel := context.WithTimeout(context.Background(), soon)
	defer cancel()
	if err := c.Complete(ctx, control.Completion{Peer: "last", Code: 0}); err != nil {
		t.Fatal(err)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d", code)
	}
}

func TestNativeSidecarWaitsForSigterm(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--native-sidecar", "--drain-min", "30s"})
	if code := p.app("app", nil, "exit 0").Exit(soon); code != 0 {
		t.Fatal("app failed")
	}
	sup.WaitLog("the proxy stays until SIGTERM", soon)
	p.undecided(sup, "a native sidecar's peers completed")
	start := time.Now()
	deleted(t, sup)
	// Every peer had completed, so the 30 s drain minimum is skipped.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stop took %v; the drain minimum should have been skipped", d)
	}
}

// A native sidecar beside a third-party app, which reports nothing: the
// preStop starts the drain and returns while the app still listens, and the
// kubelet's SIGTERM, sent once the app has exited, stops the proxy at once,
// --drain-min notwithstanding, with 0. A SIGTERM once waited --drain-min.
func TestNativeSidecarThirdPartyAppStopsAtOnce(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--native-sidecar", "--drain-min", "30s", "--app-ports", "8080"})
	p.waitHTTP(readyURL, 200, soon)
	app := p.listen("tcp", "127.0.0.1:8080")
	start := time.Now()
	hook := p.prestop()
	if code := hook.Exit(soon); code != 0 || !strings.Contains(hook.Out.String(), "native sidecar") {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("prestop took %v while the app listened; a native sidecar's returns once the drain has started", d)
	}
	p.waitHTTP(readyURL, 503, soon)
	p.unlisten(app)
	start = time.Now()
	deleted(t, sup)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("SIGTERM to exit took %v; want the stop alone, not --drain-min", d)
	}
}

// undecided asserts that the supervisor runs on with no exit code decided.
// It decides on a completion before it answers the poke, so once a peer's
// exec or complete has returned, its status is the answer: there is no
// window of time to watch.
func (p *pod) undecided(sup *proctest.Proc, after string) {
	p.t.Helper()
	if st := status(p.t, p.dir); st.ExitCode != nil {
		p.t.Fatalf("after %s: exit code %d decided", after, *st.ExitCode)
	}
	if sup.Wait(0) {
		p.t.Fatalf("after %s: supervisor exited %d", after, sup.Code())
	}
}

// waitRecord waits (bounded) until peers/<name> holds want.
func waitRecord(t testing.TB, dir, name, want string) {
	t.Helper()
	var b []byte
	if !proctest.Until(soon, func() bool {
		b, _ = os.ReadFile(filepath.Join(dir, "peers", name))
		return strings.Contains(string(b), want)
	}) {
		t.Fatalf("record %s never held %q; last %q", name, want, b)
	}
}

// supervisorStatus is the part of /v1/status the tests read.
type supervisorStatus struct {
	Peers map[string]struct {
		Running  bool `json:"running"`
		ExitCode *int `json:"exit_code"`
	} `json:"peers"`
	Awaiting     int    `json:"awaiting"`
	ExitCode     *int   `json:"exit_code"`
	RecordsError string `json:"records_error"`
}

// status reads the supervisor's /v1/status from its control socket in dir.
func status(t testing.TB, dir string) supervisorStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), soon)
	defer cancel()
	raw, err := control.NewClient(dir).Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st supervisorStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("status %s: %v", raw, err)
	}
	return st
}
