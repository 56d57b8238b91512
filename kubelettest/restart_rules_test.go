package kubelettest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Pods that restart in place (docs/design.md, "Restart rules and pods
// restarted in place"): a Job pod under restartPolicy Never whose app,
// wrapped in exec, carries its own restartPolicy Never and a rule on exit
// 42, and whose supervisor is told of it by --peer-restart. The app gets
// /hello through the proxy on both runs; its first run then exits 42 and
// its second 0 (fail-once remembers the first in an emptyDir at /tmp,
// which survives both kinds of restart). With the action Restart the
// kubelet restarts the app alone and the proxy must outlive the first run;
// with RestartAllContainers it kills every container (2 s, no preStop) and
// starts the pod again from its init containers in the same sandbox, and
// the restarted supervisor must not take the first run's 42 for the
// second's. Either way the second run's 0 ends the pod: Succeeded.
//
// Each run has its own bound, jobTimeout, as a pod of one run has: the
// first from the manifest to the app's restart (its restart count, which
// the kubelet raises as it restarts the app alone or removes every
// container), the second from there to the final phase. A
// RestartAllContainers pod starts twice from its init containers, each
// start at the kubelet's pace, so under one jobTimeout for both a busy
// node ran out of time in the second run, with the kubelet on its way
// (a native sidecar not yet stopped after the app's 0, a classic app
// still in its exec): issue 35.
func TestRestartRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, manifest string
		action         corev1.ContainerRestartRuleAction
		install        bool // the form has an install init container (classic); a native sidecar installs the binary itself
	}{
		{"rule-restart-classic", "job.yaml", corev1.ContainerRestartRuleActionRestart, true},
		{"rule-restart-native", "job-native-sidecar.yaml", corev1.ContainerRestartRuleActionRestart, false},
		{"rule-restartall-classic", "job.yaml", corev1.ContainerRestartRuleActionRestartAllContainers, true},
		{"rule-restartall-native", "job-native-sidecar.yaml", corev1.ContainerRestartRuleActionRestartAllContainers, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.action == corev1.ContainerRestartRuleActionRestartAllContainers {
				needMinor(t, 36, "the RestartAllContainers action")
			}
			needMinor(t, 35, "containers' restartPolicyRules")
			t.Parallel()
			n := theNode
			n.run(t, restartPod(t, tc.manifest, tc.name, tc.action))
			// Registered after run's cleanup, so run before it: the pod is
			// still there to be asked.
			t.Cleanup(func() { n.explainFailure(t, tc.name) })
			n.waitPod(t, tc.name, jobTimeout, "restarted after the app's exit 42", func(p *corev1.Pod) bool {
				job := status(p, "job")
				return job != nil && job.RestartCount >= 1 || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			})
			p := n.waitPhase(t, tc.name, jobTimeout, corev1.PodSucceeded)
			theReport.exits(t, p)
			job, envoy := status(p, "job"), status(p, "envoy")
			for _, s := range []*corev1.ContainerStatus{job, envoy} {
				if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
					t.Fatalf("%s did not end with 0:\n%s", s.Name, describe(p))
				}
			}
			if job.RestartCount < 1 {
				t.Fatalf("the app was not restarted:\n%s", describe(p))
			}
			logs := n.logs(t, tc.name, "envoy")
			install := status(p, "install")
			if (install != nil) != tc.install {
				t.Fatalf("an install container: %v, want %v:\n%s", install != nil, tc.install, describe(p))
			}
			if tc.action == corev1.ContainerRestartRuleActionRestart {
				// The proxy outlived the first run: one container, one run.
				want := map[string]exited{"envoy": {0, 0}, "job": {0, 1}}
				if tc.install {
					want["install"] = exited{0, 0}
				}
				wantExits(t, p, want)
				// The rule restarts the app on 42 alone: its restart is
				// proof of the code where the kubelet drops lastState.
				last := lastRun(t, p, "job", 42)
				defer func() {
					if last == nil {
						return
					}
					note(t, "the app's exit 42 → its restart %s (the kubelet's times are to the second)", startedOf(n, t, p).Sub(last.FinishedAt.Time).Round(time.Second))
				}()
			} else {
				// The proxy (and the install container, where there is
				// one) ran again, from scratch; the new supervisor set the
				// first run aside. A native sidecar's --install copied the
				// binary again, and the app's exec ran it.
				if envoy.RestartCount < 1 || (install != nil && install.RestartCount < 1) {
					t.Fatalf("the pod was not restarted as a whole:\n%s", describe(p))
				}
				if !strings.Contains(logs, "the earlier run's records no longer count") {
					t.Fatalf("the restarted supervisor did not set the first run's records aside:\n%s", logs)
				}
			}
			readyToApp := startedOf(n, t, p).Sub(logged(t, logs, readyLine))
			installs := "no install container"
			if install != nil {
				installs = fmt.Sprintf("install %d", install.RestartCount)
			}
			note(t, "the second run: proxy ready → app started %s; restarts: %s, envoy %d, job %d",
				readyToApp.Round(time.Millisecond), installs, envoy.RestartCount, job.RestartCount)
			if readyToApp < -50*time.Millisecond {
				t.Fatalf("the second app started %s after its proxy was ready: before it", readyToApp)
			}
			// The hook held the app until its proxy was ready: had it
			// failed, the kubelet would have started a classic app all the
			// same, or restarted a native sidecar. How long after the
			// proxy's readiness the app started is the kubelet's pace (and
			// after a lone Restart, the first run's length too): reported,
			// not bounded.
			for _, e := range n.events(t, tc.name) {
				if strings.Contains(e, `reason="FailedPostStartHook"`) {
					t.Fatalf("a postStart hook failed: %s", e)
				}
			}
		})
	}
}

// restartPod is a Job form's pod whose app carries restartPolicy Never and
// a rule with action on exit 42, mirrored in the supervisor's
// --peer-restart, as docs/reference.md tells users to write it.
func restartPod(t *testing.T, manifest, name string, action corev1.ContainerRestartRuleAction) *corev1.Pod {
	t.Helper()
	pod := podFrom(t, manifest, name, "/podapp", "get", hello, "fail-once", "/tmp/ran", "42")
	never := corev1.ContainerRestartPolicyNever
	job := container(pod, "job")
	job.RestartPolicy = &never
	job.RestartPolicyRules = []corev1.ContainerRestartRule{{
		Action:    action,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	job.VolumeMounts = append(job.VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	envoy := container(pod, "envoy")
	dashes := slices.Index(envoy.Command, "--")
	envoy.Command = slices.Insert(envoy.Command, dashes, fmt.Sprintf("--peer-restart=job=Never,%s:In(42)", action))
	// A proxy ready within milliseconds of its start would be ready before
	// the kubelet starts the app's container at all.
	slowStart(t, envoy)
	return pod
}

// startedOf is when the app's container, its last run's, started, as the
// runtime reports it (the kubelet's times are to the second).
func startedOf(n *node, t *testing.T, p *corev1.Pod) time.Time {
	t.Helper()
	app, err := n.criStatus(containerIDs(t, p)["job"])
	if err != nil {
		t.Fatal(err)
	}
	return app.started()
}

// explainFailure adds to a failed test what its pod was doing: the pod's
// conditions, the kubelet's events about it (a FailedPostStartHook, each
// Killing and its reason) and what its proxy and its app logged in their
// current run. A wait that failed has already said the containers' states.
func (n *node) explainFailure(t *testing.T, name string) {
	if !t.Failed() {
		return
	}
	var b strings.Builder
	if p, err := n.pod(name); err != nil || p == nil {
		fmt.Fprintf(&b, "the pod: %v (nil: %v)\n", err, p == nil)
	} else {
		b.WriteString("conditions:\n")
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s %s (since %s)\n", c.Type, c.Status, c.Reason, c.Message, c.LastTransitionTime.Format(time.RFC3339))
		}
	}
	fmt.Fprintf(&b, "the kubelet's events:\n  %s\n", strings.Join(n.events(t, name), "\n  "))
	for _, c := range []string{"envoy", "job"} {
		logs, err := n.logsOf(name, c)
		if err != nil {
			logs = err.Error()
		}
		fmt.Fprintf(&b, "the log of %s:\n%s\n", c, logs)
	}
	t.Logf("pod %s, as the test failed:\n%s", name, b.String())
}
