package kubelettest

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A busy kubelet starts the proxy's preStop hook seconds after it has
// stopped the app: the hook here waits 3 s before it runs `prestop`, past
// the 2 s that the supervisor once guessed a deletion's hook would take.
// exec saw the kubelet's SIGTERM and reported it with the app's 143, so the
// supervisor waits for the pod's termination to reach the proxy (within the
// grace period), and the late hook decides 0. (The guess decided 143 at
// 2 s, and the hook then found no supervisor.)
func TestJobDeletedPreStopLate(t *testing.T) {
	t.Parallel()
	n := theNode
	pod := podFrom(t, "job.yaml", "job-deleted-late", "/podapp", "sleep", "1h")
	hook := lifecyclePreStop(container(pod, "envoy")).Exec
	hook.Command = append([]string{"/podapp", "sleep", "3s", "exec"}, hook.Command...)
	n.run(t, pod)
	p := n.waitPod(t, "job-deleted-late", jobTimeout, "app running", func(p *corev1.Pod) bool {
		s := status(p, "job")
		return s != nil && s.State.Running != nil
	})
	got, deleted := n.deleteAndWait(t, p, "job-deleted-late", 60*time.Second)
	wantCodes(t, got, map[string]int32{"envoy": 0, "job": 143})
	for _, e := range n.events(t, "job-deleted-late") {
		if strings.Contains(e, "FailedPreStopHook") {
			t.Fatalf("the proxy's preStop hook failed: %s", e)
		}
	}
	note(t, "the preStop ran 3 s late: the app exited 143 at %s, the proxy 0 at %s",
		got["job"].finished().Sub(deleted).Round(time.Millisecond), got["envoy"].finished().Sub(deleted).Round(time.Millisecond))
}

// The kubelet stops the app alone when its liveness probe fails; under
// Never it does not restart it, and nothing reaches the proxy. exec
// reports the kubelet's SIGTERM, and the supervisor waits for a pod
// termination that never comes, bounded by the grace period (5 s here)
// and the 2 s deletion window from the app's stop: then the app's 143
// decides, and the pod fails as its app did.
func TestJobAppKilledByLiveness(t *testing.T) {
	t.Parallel()
	n := theNode
	const grace = 5
	pod := podFrom(t, "job.yaml", "job-liveness", "/podapp", "sleep", "1h")
	withGracePeriod(pod, grace)
	// 5 s leaves no drain after the stop timeout and the margin: the
	// drain's bound is given, and the grace period is only the bound of
	// the wait for a termination.
	envoy := container(pod, "envoy")
	envoy.Command = slices.Insert(envoy.Command, slices.Index(envoy.Command, "--"), "--drain-timeout=1s", "--stop-timeout=1s")
	job := container(pod, "job")
	// A probe that always fails: the kubelet kills the app after its first.
	job.LivenessProbe = &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/podapp", "exit", "1"}}},
		InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 1,
	}
	n.run(t, pod)
	p := n.waitPhase(t, "job-liveness", jobTimeout, corev1.PodFailed)
	wantExits(t, p, map[string]exited{"install": {0, 0}, "envoy": {143, 0}, "job": {143, 0}})
	got := n.waitExits(t, containerIDs(t, p), 10*time.Second)
	waited := got["envoy"].finished().Sub(got["job"].finished())
	note(t, "the probe killed the app (143); the proxy waited %s for a termination, then exited 143", waited.Round(time.Millisecond))
	// The bound is counted from the app's stop, which came before its
	// exit; the proxy then stops within its stop timeout.
	if waited > (grace+2+1)*time.Second+10*time.Second {
		t.Fatalf("the proxy exited %s after the app: longer than the grace period and the window allow", waited)
	}
}
