package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
)

// Per-container restart rules (KEP-5307): a Job pod under restartPolicy
// Never whose app the kubelet restarts in place after exit 42. The proxy
// must outlive the first run, and the second run's code decides.
func TestPeerRestartRuleKeepsTheProxy(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--peers", "job", "--restart-policy", "Never", "--peer-restart", "job=Never,Restart:In(42)"})
	if code := p.app("job", nil, "exit 42").Exit(soon); code != 42 {
		t.Fatalf("first run exit %d, want 42", code)
	}
	sup.WaitLog("restarts it in place", soon)
	p.undecided(sup, "an exit that a Restart rule restarts")
	if code := p.app("job", nil, "exit 0").Exit(soon); code != 0 {
		t.Fatalf("second run exit %d", code)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want the second run's 0", code)
	}
}

// kubeletMinGrace is the grace period the kubelet gives each container it
// kills for a RestartAllContainers (kuberuntime's
// minimumGracePeriodInSeconds, with the override 0 and no preStop hook).
const kubeletMinGrace = 2 * time.Second

// RestartAllContainers (KEP-5532): the kubelet kills every container
// (SIGTERM, 2 s, no preStop) and starts the pod again in the same sandbox,
// the emptyDir kept. The first run's records must not decide the second
// run, and a restart of the proxy container alone during the second run
// must keep that run's completions.
func TestRestartAllContainersStartsANewRun(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	flags := []string{"--peers", "job,uploader", "--peer-restart", "job=Never,RestartAllContainers:In(42)"}
	sup := p.supervise(flags)
	if code := p.app("uploader", nil, "exit 0").Exit(soon); code != 0 {
		t.Fatalf("uploader exit %d", code)
	}
	if code := p.app("job", nil, "exit 42").Exit(soon); code != 42 {
		t.Fatalf("job exit %d, want 42", code)
	}
	sup.WaitLog("restarts every container of the pod", soon)
	p.undecided(sup, "an exit that restarts every container")
	// The kubelet's kill: the proxy stops at once, within its grace.
	sup.Signal(syscall.SIGTERM)
	at := time.Now()
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("first supervisor exit %d on the kubelet's SIGTERM, want 0", code)
	}
	if took := sup.Ended().Sub(at); took > kubeletMinGrace {
		t.Fatalf("first supervisor took %v to exit on SIGTERM, past the kubelet's %v", took, kubeletMinGrace)
	}

	// The second run, on the same volume: uploader's 0 and job's 42 are the
	// first run's. A classic sidecar's app may start before the new
	// supervisor has read anything: its exec marks job running again over
	// the 42 first. The new proxy starts slowly.
	job := p.app("job", nil, "echo second run; exit 0")
	waitRecord(t, p.dir, "job", `"running":true`)
	sup2 := p.supervise(flags, "--init-delay", "300ms")
	if code := job.Exit(soon); code != 0 {
		t.Fatalf("second job exit %d", code)
	}
	// The supervisor logs the completion a moment after the exit: read
	// the order once it has.
	sup2.WaitLog("peer completed", soon)
	out := sup2.Out.String()
	if ready, done := strings.Index(out, "proxy ready"), strings.LastIndex(out, "peer completed"); ready < 0 || done < ready {
		t.Fatal("the second job completed before the second proxy was ready: exec did not wait for it")
	}
	p.undecided(sup2, "the second job's success while uploader has not run again")
	if st := status(t, p.dir); st.Awaiting != 1 {
		t.Fatalf("awaiting %d after the second job, want 1 (uploader)", st.Awaiting)
	}

	// The proxy container restarts alone: job's second-run 0 still counts.
	sup2.Kill()
	sup3 := p.supervise(flags)
	p.waitHTTP(readyURL, 200, soon)
	p.undecided(sup3, "a lone restart of the proxy")
	if st := status(t, p.dir); st.Awaiting != 1 {
		t.Fatalf("awaiting %d after a lone restart, want 1: the second run's completion was lost", st.Awaiting)
	}
	if code := p.app("uploader", nil, "exit 5").Exit(soon); code != 5 {
		t.Fatalf("second uploader exit %d", code)
	}
	if code := sup3.Exit(soon); code != 5 {
		t.Fatalf("supervisor exit %d, want the second run's 5", code)
	}
}

// The next run of a pod restarted in place may report before its proxy
// container has started: an app that the kubelet starts before the proxy
// (listed first, as Istio's injection without holdApplicationUntilProxyStarts
// lists it) and that reports with `complete`, without waiting for the proxy
// (issue 38, item 3). Its completion is the new run's and must count, as
// must a POST alone that says what the first run's record still on disk
// said, while what the first run left counts for nothing and is not logged
// as a completion of this run (item 9); a restart of the proxy container
// alone keeps the new run's completions. The in-place restart is the
// kubelet's: every container stopped, then the pod started again from its
// init container, each container PID 1 of a PID namespace of its own.
func TestRestartAllContainersCountsTheNextRunsEarlyCompletion(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	flags := []string{"--peers", "job,uploader,notifier", "--peer-restart", "job=Never,RestartAllContainers:In(42)"}
	binDir := filepath.Join(filepath.Dir(p.dir), "bin")
	initContainer := func() {
		t.Helper()
		c := p.start("install", true, nil, bin.supervisor, "install", binDir)
		if code := c.Exit(soon); code != 0 {
			t.Fatalf("install exit %d:\n%s", code, c.Out.String())
		}
	}

	// The first run: uploader and notifier succeed, then job's 42 restarts
	// the pod.
	initContainer()
	sup := p.supervise(flags)
	for _, name := range []string{"uploader", "notifier"} {
		if code := p.app(name, nil, "exit 0").Exit(soon); code != 0 {
			t.Fatalf("%s exit %d", name, code)
		}
	}
	if code := p.app("job", nil, "exit 42").Exit(soon); code != 42 {
		t.Fatalf("job exit %d, want 42", code)
	}
	sup.WaitLog("restarts every container of the pod", soon)
	// The kubelet kills every container still running (the proxy's), then
	// removes them all.
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("first supervisor exit %d on the kubelet's SIGTERM, want 0", code)
	}

	// The second run: the init container again, then uploader, which
	// reports its success before the proxy container has started, then the
	// proxy. job's 42 and notifier's 0 are still on disk.
	initContainer()
	uploader := p.start("app uploader", true, nil, "/bin/sh", "-c",
		fmt.Sprintf("echo second run; exec %s complete --control-dir %s --name uploader --exit-code 0", bin.supervisor, p.dir))
	if code := uploader.Exit(soon); code != 0 {
		t.Fatalf("second uploader's complete exit %d", code)
	}
	sup2 := p.supervise(flags, "--init-delay", "300ms")
	p.waitHTTP(readyURL, 200, soon)
	st := status(t, p.dir)
	if st.Awaiting != 2 {
		t.Fatalf("awaiting %d after the second run's uploader reported 0, want 2 (job, notifier): the new run's completion was taken for the old run's, or an old one for the new run's\n%s", st.Awaiting, sup2.Out.String())
	}
	if u := st.Peers["uploader"]; u.ExitCode == nil || *u.ExitCode != 0 {
		t.Fatalf("status shows uploader %+v, want the second run's 0", u)
	}
	for _, name := range []string{"job", "notifier"} {
		if _, ok := st.Peers[name]; ok {
			t.Fatalf("status shows the first run's %s as this run's", name)
		}
	}
	// What the first run left is said to count for nothing, not logged as
	// a completion of this run.
	sup2.WaitLog("the earlier run's records no longer count", soon)
	out := sup2.Out.String()
	for _, stale := range []string{`msg="peer completed" peer=job`, `msg="peer completed" peer=notifier`, "keeping the proxy until SIGTERM"} {
		if strings.Contains(out, stale) {
			t.Fatalf("the second supervisor logs the first run's completion as this run's (%q):\n%s", stale, out)
		}
	}
	p.undecided(sup2, "the second run's uploader alone")

	// The proxy container restarts alone: uploader's second-run 0 counts.
	sup2.Kill()
	sup3 := p.supervise(flags)
	p.waitHTTP(readyURL, 200, soon)
	if st := status(t, p.dir); st.Awaiting != 2 {
		t.Fatalf("awaiting %d after a lone restart of the proxy, want 2: the second run's completion was lost", st.Awaiting)
	}
	p.undecided(sup3, "a lone restart of the proxy")

	// notifier's second run reports by POST alone the 0 that its first
	// run's record, still on disk, holds.
	ctx, cancel := context.WithTimeout(context.Background(), soon)
	defer cancel()
	if err := control.NewClient(p.dir).Complete(ctx, control.Completion{Peer: "notifier", Code: 0}); err != nil {
		t.Fatal(err)
	}
	if st := status(t, p.dir); st.Awaiting != 1 {
		t.Fatalf("awaiting %d after notifier's POST of 0, want 1 (job): the POST was taken for the first run's record", st.Awaiting)
	}
	if code := p.app("job", nil, "exit 0").Exit(soon); code != 0 {
		t.Fatalf("second job exit %d", code)
	}
	if code := sup3.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want the second run's 0", code)
	}
}
