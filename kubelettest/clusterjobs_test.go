package kubelettest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// clusterJobTimeout bounds a Job through the API from its creation to its
// final condition, retries and the Job controller's backoff (10 s, then
// 20 s) included.
const clusterJobTimeout = 4 * time.Minute

// onFailure turns a Never form into OnFailure (the pod's policy and the
// supervisor's flag) and gives the app a writable /tmp for fail-once's
// marker, as job-onfailure.yaml does.
func onFailure(t *testing.T, job *batchv1.Job) {
	t.Helper()
	spec := &job.Spec.Template.Spec
	spec.RestartPolicy = corev1.RestartPolicyOnFailure
	found := false
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for i, a := range c.Command {
			if a == "--restart-policy=Never" {
				c.Command[i], found = "--restart-policy=OnFailure", true
			}
		}
	}
	if !found {
		t.Fatal("the form's supervisor has no --restart-policy=Never")
	}
	if slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "tmp" }) {
		return
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	app := &spec.Containers[len(spec.Containers)-1]
	app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
}

// alone strips a Job's pod to its app, unwrapped: the baseline of the
// time from the app's exit to the Job's completion.
func alone(job *batchv1.Job) {
	spec := &job.Spec.Template.Spec
	app := spec.Containers[len(spec.Containers)-1]
	app.Command = app.Command[len(beforeDashes(app.Command)):]
	app.VolumeMounts = nil
	spec.InitContainers, spec.Containers, spec.Volumes = nil, []corev1.Container{app}, nil
}

// Jobs through the API, each form under Never (a success; a failure, which
// the Job controller retries backoffLimit times) and OnFailure (the
// kubelet restarts the app in the pod), classic (an install init container
// and the proxy) and native (one container): the Job's
// final condition, every pod's phase, every container's exit code and
// restarts, and no failed hook in the events.
func TestClusterJobs(t *testing.T) {
	t.Parallel()
	needCluster(t)
	type exits = map[string]exited
	for _, tc := range []struct {
		name, manifest string
		onFailure      bool
		plain          bool // the baseline: the app alone, no proxy
		app            []string
		want           batchv1.JobConditionType
		pods           []exits // each pod's, oldest first
		phase          corev1.PodPhase
	}{
		{"baseline-app-alone", "job.yaml", false, true, []string{"/podapp", "exit", "0"}, batchv1.JobComplete,
			[]exits{{"job": {0, 0}}}, corev1.PodSucceeded},
		{"classic-never-ok", "job.yaml", false, false, []string{"/podapp", "get", hello}, batchv1.JobComplete,
			[]exits{{"install": {0, 0}, "envoy": {0, 0}, "job": {0, 0}}}, corev1.PodSucceeded},
		{"classic-never-fail", "job.yaml", false, false, []string{"/podapp", "get", hello, "exit", "3"}, batchv1.JobFailed,
			slices.Repeat([]exits{{"install": {0, 0}, "envoy": {3, 0}, "job": {3, 0}}}, 3), corev1.PodFailed},
		{"classic-onfailure", "job-onfailure.yaml", false, false, []string{"/podapp", "fail-once", "/tmp/tried", "3", "get", hello}, batchv1.JobComplete,
			[]exits{{"install": {0, 0}, "envoy": {0, 0}, "job": {0, 1}}}, corev1.PodSucceeded},
		{"native-never-ok", "job-native-sidecar.yaml", false, false, []string{"/podapp", "get", hello}, batchv1.JobComplete,
			[]exits{{"envoy": {0, 0}, "job": {0, 0}}}, corev1.PodSucceeded},
		{"native-never-fail", "job-native-sidecar.yaml", false, false, []string{"/podapp", "get", hello, "exit", "3"}, batchv1.JobFailed,
			slices.Repeat([]exits{{"envoy": {0, 0}, "job": {3, 0}}}, 3), corev1.PodFailed},
		{"native-onfailure", "job-native-sidecar.yaml", true, false, []string{"/podapp", "fail-once", "/tmp/tried", "3", "get", hello}, batchv1.JobComplete,
			[]exits{{"envoy": {0, 0}, "job": {0, 1}}}, corev1.PodSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := theNode.cluster
			job := jobFrom(t, tc.manifest, tc.name, tc.app...)
			if tc.onFailure {
				onFailure(t, job)
			}
			if tc.plain {
				alone(job)
			}
			c.createJob(t, job)
			job, seen := c.waitJob(t, "default", tc.name, clusterJobTimeout, tc.want)
			pods := c.jobPods(t, "default", tc.name)
			if len(pods) != len(tc.pods) {
				t.Fatalf("%d pods, want %d:\n%s", len(pods), len(tc.pods), c.describeJob(job))
			}
			for i := range pods {
				p := &pods[i]
				if p.Status.Phase != tc.phase {
					t.Fatalf("pod %s: %s, want %s:\n%s", p.Name, p.Status.Phase, tc.phase, describe(p))
				}
				wantExits(t, p, tc.pods[i])
				if s := status(p, "job"); s.RestartCount > 0 {
					lastRun(t, p, "job", 3)
				}
				t.Logf("pod %s events: %s", p.Name, strings.Join(c.wantNoFailedHook(t, p.Name), " "))
			}
			final := jobCondition(job, tc.want)
			reasons := c.reasons(t, "Job", tc.name)
			t.Logf("Job %s: %s (%s), events: %s", tc.name, tc.want, final.Reason, strings.Join(reasons, " "))
			// The Job controller's own account: a pod made per run, and how
			// the Job ended.
			end := map[batchv1.JobConditionType]string{batchv1.JobComplete: "Completed", batchv1.JobFailed: batchv1.JobReasonBackoffLimitExceeded}[tc.want]
			created := 0
			for _, r := range reasons {
				if r == "SuccessfulCreate" {
					created++
				}
			}
			if created != len(tc.pods) || !slices.Contains(reasons, end) {
				t.Fatalf("Job %s's events %q: want %d SuccessfulCreate and %s", tc.name, reasons, len(tc.pods), end)
			}
			if tc.want == batchv1.JobFailed && final.Reason != batchv1.JobReasonBackoffLimitExceeded {
				t.Fatalf("Job %s failed for %s, want %s", tc.name, final.Reason, batchv1.JobReasonBackoffLimitExceeded)
			}
			if tc.want == batchv1.JobComplete {
				took := c.appExitToComplete(t, &pods[0], "job", seen)
				note(t, "the app's exit to the Job's Complete %s", took.Round(10*time.Millisecond))
				if took > 60*time.Second {
					t.Fatalf("the Job was Complete %s after the app's exit", took)
				}
			}
		})
	}
}

// A Job deleted through the API while its app runs, with foreground and
// background propagation: the pod is deleted, the kubelet SIGTERMs the app
// (143) and runs the proxy's preStop hook, which does not fail, and the
// supervisor exits 0. Under foreground propagation the Job is still there
// (held by its foregroundDeletion finalizer) when its pod's deletion
// starts; under background it is already gone.
func TestClusterJobDeleted(t *testing.T) {
	t.Parallel()
	needCluster(t)
	for _, tc := range []struct {
		name, manifest string
		policy         metav1.DeletionPropagation
		exits          map[string]exited
	}{
		{"deleted-foreground", "job.yaml", metav1.DeletePropagationForeground, map[string]exited{"install": {0, 0}, "envoy": {0, 0}, "job": {143, 0}}},
		{"deleted-background", "job.yaml", metav1.DeletePropagationBackground, map[string]exited{"install": {0, 0}, "envoy": {0, 0}, "job": {143, 0}}},
		{"deleted-native-foreground", "job-native-sidecar.yaml", metav1.DeletePropagationForeground, map[string]exited{"envoy": {0, 0}, "job": {143, 0}}},
		{"deleted-native-background", "job-native-sidecar.yaml", metav1.DeletePropagationBackground, map[string]exited{"envoy": {0, 0}, "job": {143, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := theNode.cluster
			ctx := context.Background()
			c.createJob(t, jobFrom(t, tc.manifest, tc.name, "/podapp", "sleep", "1h"))
			var pod *corev1.Pod
			if err := proctest.Poll(jobTimeout, func() error {
				pods := c.jobPods(t, "default", tc.name)
				if len(pods) == 1 {
					if s := status(&pods[0], "job"); s != nil && s.State.Running != nil {
						pod = &pods[0]
						return nil
					}
				}
				return errNotYet
			}); err != nil {
				t.Fatalf("the app is not running after %s", jobTimeout)
			}
			// Watched from before the deletion: the pod's last status, which
			// the kubelet writes before the pod goes, holds the exits.
			w, err := c.client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{
				FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { w.Stop() }() // the watch taken up last
			policy := tc.policy
			deleted := time.Now()
			if err := c.client.BatchV1().Jobs("default").Delete(ctx, tc.name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
				t.Fatal(err)
			}
			// The Job's and the pod's ends, and whether the Job was there
			// when the pod's deletion began.
			var jobGone, podGone time.Time
			var jobAtPodDeletion *bool
			last := pod
			bound := time.After(2 * time.Minute)
			for jobGone.IsZero() || podGone.IsZero() {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						// The API server ends watches when it likes (a
						// loaded one sooner): take it up again from the
						// last version seen, so no event is missed.
						w.Stop()
						if w, err = c.client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{
							FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: last.ResourceVersion,
						}); err != nil {
							t.Fatalf("the pod's watch ended, and could not be taken up again from version %s: %v", last.ResourceVersion, err)
						}
						continue
					}
					if p, ok := ev.Object.(*corev1.Pod); ok {
						last = p
						if p.DeletionTimestamp != nil && jobAtPodDeletion == nil {
							_, err := c.client.BatchV1().Jobs("default").Get(ctx, tc.name, metav1.GetOptions{})
							jobAtPodDeletion = ref(err == nil)
						}
						if ev.Type == "DELETED" {
							podGone = time.Now()
						}
					}
				case <-time.After(100 * time.Millisecond):
				case <-bound:
					t.Fatalf("2m after the deletion: Job gone %v, pod gone %v:\n%s", !jobGone.IsZero(), !podGone.IsZero(), describe(last))
				}
				if jobGone.IsZero() {
					if _, err := c.client.BatchV1().Jobs("default").Get(ctx, tc.name, metav1.GetOptions{}); err != nil {
						jobGone = time.Now()
					}
				}
			}
			theReport.phase(t, "Job and pod deleted")
			wantExits(t, last, tc.exits)
			reasons := c.wantNoFailedHook(t, pod.Name)
			if !slices.Contains(reasons, "Killing") {
				t.Fatalf("no Killing event for pod %s, so its events are not seen: %q", pod.Name, reasons)
			}
			t.Logf("events: %s", strings.Join(reasons, " "))
			note(t, "deleted (%s): the pod gone at %s, the Job at %s", tc.policy,
				podGone.Sub(deleted).Round(100*time.Millisecond), jobGone.Sub(deleted).Round(100*time.Millisecond))
			if jobAtPodDeletion == nil {
				t.Fatal("the pod's deletion was not seen")
			}
			if held := tc.policy == metav1.DeletePropagationForeground; *jobAtPodDeletion != held {
				t.Fatalf("%s propagation: the Job was there when its pod's deletion began: %v, want %v", tc.policy, *jobAtPodDeletion, held)
			}
		})
	}
}

// errNotYet is a poll's error while the awaited state has not come.
var errNotYet = errors.New("not yet")

// The CronJob form, every minute instead of every ten, with history
// limits of one: its runs are made on schedule (each Job's scheduled time
// a minute boundary, created within 30 s and Complete within a busy pod's
// time after), each pod succeeds with every container exiting 0, and once
// two runs have succeeded only the last Job is kept. Two CronJobs: the
// shipped one (cronjob.yaml, the classic form), and one whose pod template
// only asks the admission policy for the proxy (admission-policy/job.yaml's
// Job, scheduled), whose every scheduled Job's pod the API server injects.
func TestClusterCronJob(t *testing.T) {
	t.Parallel()
	c := needCluster(t)
	for _, tc := range []struct {
		name  string
		job   string // the Job whose spec the CronJob schedules; "": cronjob.yaml's own
		exits map[string]exited
	}{
		{"cronjob", "", map[string]exited{"install": {0, 0}, "envoy": {0, 0}, "job": {0, 0}}},
		{"cronjob-policy", policyDir + "/job.yaml", map[string]exited{sidecarName: {0, 0}, "job": {0, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c.cronJob(t, tc.name, tc.job, tc.exits)
		})
	}
}

// cronJob runs cronjob.yaml named name every minute, with the spec of the
// Job in manifest (labelled to ask the admission policy) when one is
// given, and checks its runs and the kept run's pod's exits.
func (c *cluster) cronJob(t *testing.T, name, manifest string, exits map[string]exited) {
	t.Helper()
	theReport.of(t)
	ctx := context.Background()
	var cj batchv1.CronJob
	readDeploy(t, "envoy-sidecar/cronjob.yaml", &cj)
	cj.Name, cj.Namespace = name, "default"
	cj.Spec.Schedule = "* * * * *"
	cj.Spec.SuccessfulJobsHistoryLimit, cj.Spec.FailedJobsHistoryLimit = ref[int32](1), ref[int32](1)
	if manifest != "" {
		c.admissionPolicies(t)
		var job batchv1.Job
		readDeploy(t, manifest, &job)
		askInjection(&job.Spec.Template.ObjectMeta)
		cj.Spec.JobTemplate.Spec = job.Spec
	}
	adaptTemplate(t, &cj.Spec.JobTemplate.Spec.Template, name, "/podapp", "get", hello)
	if _, err := c.client.BatchV1().CronJobs("default").Create(ctx, &cj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		c.client.BatchV1().CronJobs("default").Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}) //nolint:errcheck
	})
	// Every Job the CronJob made, by name, as last seen. Once two runs have
	// succeeded the CronJob is suspended: with a run a minute, a busy node
	// whose runs take over a minute never has a moment with one Job alone,
	// so the test waits for what the controller does once no run starts,
	// the history cut to the last success, rather than for such a moment.
	seen := map[string]batchv1.Job{}
	var last []batchv1.Job
	list := func() error {
		list, err := c.client.BatchV1().Jobs("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		last = nil
		for _, j := range list.Items {
			if len(j.OwnerReferences) == 1 && j.OwnerReferences[0].Name == name {
				seen[j.Name] = j
				last = append(last, j)
			}
		}
		return nil
	}
	completed := func() int {
		done := 0
		for _, j := range seen {
			if jobCondition(&j, batchv1.JobComplete) != nil {
				done++
			}
		}
		return done
	}
	// The first run is due within a minute, the second a minute later, and
	// each may take 30 s to be created and jobTimeout to run.
	twoRuns := 2*time.Minute + 2*(30*time.Second+jobTimeout)
	err := proctest.Poll(twoRuns, func() error {
		if err := list(); err != nil {
			return err
		}
		if completed() < 2 {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after %v: %d runs seen, %d of them Complete, want 2: %v", twoRuns, len(seen), completed(), err)
	}
	suspend := []byte(`{"spec":{"suspend":true}}`)
	if _, err := c.client.BatchV1().CronJobs("default").Patch(ctx, name, types.MergePatchType, suspend, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The runs still going end, and the history keeps the last success.
	err = proctest.Poll(30*time.Second+jobTimeout, func() error {
		if err := list(); err != nil {
			return err
		}
		if len(last) != 1 || jobCondition(&last[0], batchv1.JobComplete) == nil {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("suspended after 2 runs Complete: %d runs seen, %d kept, want the last success alone: %v", len(seen), len(last), jobNames(last))
	}
	for _, j := range seen {
		if jobCondition(&j, batchv1.JobFailed) != nil {
			t.Fatalf("run %s failed:\n%s", j.Name, c.describeJob(&j))
		}
		at, err := time.Parse(time.RFC3339, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation])
		if err != nil || at.Second() != 0 {
			t.Fatalf("run %s: scheduled at %q (%v), want a minute boundary", j.Name, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation], err)
		}
		// Created before the next run is due: the controller's pace on a
		// loaded node (43 s beside stress-ng --cpu 2 --io 1) is not the
		// schedule, which the annotation's minute boundary holds.
		if d := j.CreationTimestamp.Sub(at); d < 0 || d >= time.Minute {
			t.Fatalf("run %s: created %s after its scheduled time, at or past the next run's", j.Name, d)
		}
		if cond := jobCondition(&j, batchv1.JobComplete); cond != nil {
			// Its creation's 30 s and jobTimeout, what a pod may take on a
			// busy node from its manifest to its end; a minute was too
			// little for the kubelet's pace under the suite's own load.
			if d := cond.LastTransitionTime.Sub(at); d > 30*time.Second+jobTimeout {
				t.Fatalf("run %s: Complete %s after its scheduled time", j.Name, d)
			}
			t.Logf("run %s: scheduled %s, created +%s, Complete +%s", j.Name, at.Format(time.TimeOnly),
				j.CreationTimestamp.Sub(at), cond.LastTransitionTime.Sub(at))
		}
	}
	kept := last[0]
	pods := c.jobPods(t, "default", kept.Name)
	if len(pods) != 1 {
		t.Fatalf("the kept run %s has %d pods, want 1", kept.Name, len(pods))
	}
	if manifest != "" {
		wantInjected(t, &pods[0])
	}
	wantExits(t, &pods[0], exits)
	c.wantNoFailedHook(t, pods[0].Name)
	reasons := c.reasons(t, "CronJob", name)
	t.Logf("the CronJob's events: %s", strings.Join(reasons, " "))
	theReport.phase(t, "CronJob ran")
	note(t, "%d runs seen, each on schedule and none failed, %d kept", len(seen), len(last))
	if !slices.Contains(reasons, "SawCompletedJob") || !slices.Contains(reasons, "SuccessfulDelete") {
		t.Fatalf("the CronJob's events lack SawCompletedJob or SuccessfulDelete: %q", reasons)
	}
}

func jobNames(jobs []batchv1.Job) []string {
	var names []string
	for _, j := range jobs {
		names = append(names, j.Name)
	}
	return names
}
