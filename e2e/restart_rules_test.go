package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
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
