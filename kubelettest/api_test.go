package kubelettest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// jobFrom is a deploy/envoy-sidecar Job named name, its pod adapted to the
// node as podFrom adapts a static pod.
func jobFrom(t *testing.T, manifest, name string, app ...string) *batchv1.Job {
	t.Helper()
	var job batchv1.Job
	readDeploy(t, "envoy-sidecar/"+manifest, &job)
	job.Name, job.Namespace = name, "default"
	adaptTemplate(t, &job.Spec.Template, name, app...)
	return &job
}

// adaptTemplate adapts a form's pod template to the node.
func adaptTemplate(t *testing.T, tmpl *corev1.PodTemplateSpec, name string, app ...string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Name = name
	adaptPod(t, pod, app...)
	pod.Name = ""
	tmpl.ObjectMeta, tmpl.Spec = pod.ObjectMeta, pod.Spec
}

// createJob creates the Job; the test's cleanup deletes it and its pods.
func (c *cluster) createJob(t *testing.T, job *batchv1.Job) {
	t.Helper()
	theReport.of(t)
	ctx := context.Background()
	if _, err := c.client.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Job %s: %v", job.Name, err)
	}
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		c.client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}) //nolint:errcheck // may be gone
	})
}

// jobCondition is the Job's condition of type typ that is true, or nil.
func jobCondition(job *batchv1.Job, typ batchv1.JobConditionType) *batchv1.JobCondition {
	for i, cond := range job.Status.Conditions {
		if cond.Type == typ && cond.Status == corev1.ConditionTrue {
			return &job.Status.Conditions[i]
		}
	}
	return nil
}

// waitJob waits up to timeout for the Job to be Complete or Failed, asserts
// which, and returns it with the time its final condition was first seen.
func (c *cluster) waitJob(t *testing.T, ns, name string, timeout time.Duration, want batchv1.JobConditionType) (*batchv1.Job, time.Time) {
	t.Helper()
	var job *batchv1.Job
	err := proctest.Poll(timeout, func() (err error) {
		job, err = c.client.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if jobCondition(job, batchv1.JobComplete) == nil && jobCondition(job, batchv1.JobFailed) == nil {
			return fmt.Errorf("Job %s not finished", name)
		}
		return nil
	})
	seen := time.Now()
	if err != nil {
		t.Fatalf("after %s: %v:\n%s", timeout, err, c.describeJob(job))
	}
	if jobCondition(job, want) == nil {
		t.Fatalf("Job %s did not end %s:\n%s", name, want, c.describeJob(job))
	}
	theReport.phase(t, "Job "+string(want))
	return job, seen
}

// jobPods are the Job's pods, oldest first.
func (c *cluster) jobPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	list, err := c.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return pods
}

// describeJob is a Job's status and its pods', for a failure message.
func (c *cluster) describeJob(job *batchv1.Job) string {
	if job == nil {
		return "(no Job)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Job %s: active %d succeeded %d failed %d\n", job.Name, job.Status.Active, job.Status.Succeeded, job.Status.Failed)
	for _, cond := range job.Status.Conditions {
		fmt.Fprintf(&b, "  %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	list, err := c.client.CoreV1().Pods(job.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
	if err == nil {
		for i := range list.Items {
			fmt.Fprintf(&b, "pod %s: %s", list.Items[i].Name, describe(&list.Items[i]))
		}
	}
	return b.String()
}

// events are the API's events about the object, oldest first.
func (c *cluster) events(t *testing.T, kind, name string) []corev1.Event {
	t.Helper()
	list, err := c.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name,
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := list.Items
	slices.SortFunc(evs, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return evs
}

// failedHooks are the reasons of the events that say a lifecycle hook
// failed: none of the forms' hooks may.
var failedHooks = []string{"FailedPreStopHook", "FailedPostStartHook"}

// wantNoFailedHook asserts that no event about the pod says a hook failed,
// and returns the events' reasons.
func (c *cluster) wantNoFailedHook(t *testing.T, pod string) []string {
	t.Helper()
	var reasons []string
	for _, e := range c.events(t, "Pod", pod) {
		if slices.Contains(failedHooks, e.Reason) {
			t.Fatalf("pod %s: %s: %s", pod, e.Reason, e.Message)
		}
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// reasons are the reasons of the object's events, oldest first.
func (c *cluster) reasons(t *testing.T, kind, name string) []string {
	t.Helper()
	var reasons []string
	for _, e := range c.events(t, kind, name) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// appExitToComplete is how long after the app's exit (the runtime's time,
// to the nanosecond) the Job's Complete condition was first seen (to
// about 100 ms, the poll's period).
func (c *cluster) appExitToComplete(t *testing.T, pod *corev1.Pod, app string, seen time.Time) time.Duration {
	t.Helper()
	s := status(pod, app)
	if s == nil {
		t.Fatalf("pod %s has no container %s", pod.Name, app)
	}
	_, id, _ := strings.Cut(s.ContainerID, "://")
	st, err := theNode.criStatus(id)
	if err != nil {
		t.Fatalf("the runtime's status of %s: %v", app, err)
	}
	return seen.Sub(st.finished())
}
