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
			t.Parallel()
			n := theNode
			n.run(t, restartPod(t, tc.manifest, tc.name, tc.action))
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
				last := job.LastTerminationState.Terminated
				if last == nil || last.ExitCode != 42 {
					t.Fatalf("the app's first run: %+v, want exit 42", last)
				}
				defer func() {
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
			if readyToApp < -50*time.Millisecond || readyToApp > 30*time.Second {
				t.Fatalf("the second app started %s after its proxy was ready, outside 0 to 30s", readyToApp)
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
