package kubelettest

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// renderTimeJob is the chart's render-time path (its workloads value, for
// a cluster whose API server runs no mutating policy) beside the policy:
// the chart renders injected's Job, without the inject label, with the
// sidecar in its pod template; the API server's defaults applied (a dry
// run), that sidecar, its volumes and the app's env and mounts are those
// the installed policy gave injectedPod, field for field; and the rendered
// Job completes in the node. set is the image values helm installed with.
func (c *cluster) renderTimeJob(t *testing.T, chart, set string, injected *batchv1.Job, injectedPod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	job.APIVersion, job.Kind = "batch/v1", "Job"
	job.Name, job.Namespace = "helm-render-job", injected.Namespace
	job.Spec = *injected.Spec.DeepCopy()
	delete(job.Spec.Template.Labels, injectLabel)
	workload, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.helm(t, "template", "ps-render", chart, "--set", set, "--set", "mutatingPolicy=false",
		"--set-json", "workloads=["+string(workload)+"]")
	if err != nil {
		t.Fatalf("helm template of the render-time path: %v\n%s", err, out)
	}
	var rendered *batchv1.Job
	for _, doc := range yamlDocs(out) {
		if kindOf(doc) != "Job" {
			continue
		}
		rendered = &batchv1.Job{}
		if err := yaml.UnmarshalStrict(doc, rendered); err != nil {
			t.Fatalf("the rendered Job: %v\n%s", err, doc)
		}
	}
	if rendered == nil {
		t.Fatalf("the render-time path renders no Job:\n%s", out)
	}
	pod := &corev1.Pod{ObjectMeta: rendered.Spec.Template.ObjectMeta, Spec: rendered.Spec.Template.Spec}
	pod.Name, pod.Namespace = "helm-render-probe", rendered.Namespace
	if pod.Namespace == "" {
		pod.Namespace = injected.Namespace
	}
	p, err := c.dryRun(ctx, pod)
	if err != nil {
		t.Fatalf("the rendered Job's pod: %v", err)
	}
	if got, want := sidecars(p), sidecars(injectedPod); !reflect.DeepEqual(got, want) {
		t.Errorf("the render-time sidecar differs from the policy's:\nrendered %+v\ninjected %+v", got, want)
	}
	if got, want := ours(p.Spec.Volumes), ours(injectedPod.Spec.Volumes); !reflect.DeepEqual(got, want) {
		t.Errorf("the render-time volumes differ from the policy's:\nrendered %+v\ninjected %+v", got, want)
	}
	for i := range p.Spec.Containers {
		got, want := p.Spec.Containers[i], injectedPod.Spec.Containers[i]
		// The service account's mount is another admission plugin's, at
		// its own place (before the policy's, after the render's), and its
		// name is the pod's own.
		if !reflect.DeepEqual(got.Env, want.Env) || !reflect.DeepEqual(ourMounts(got.VolumeMounts), ourMounts(want.VolumeMounts)) {
			t.Errorf("container %s: rendered env %v, mounts %v; the policy's %v, %v", got.Name, got.Env, got.VolumeMounts, want.Env, want.VolumeMounts)
		}
	}
	if rendered.Namespace == "" {
		rendered.Namespace = injected.Namespace
	}
	c.createJob(t, rendered)
	done, _ := c.waitJob(t, rendered.Namespace, rendered.Name, clusterJobTimeout, batchv1.JobComplete)
	pods := c.jobPods(t, rendered.Namespace, rendered.Name)
	if len(pods) != 1 {
		t.Fatalf("%d pods of the rendered Job, want 1:\n%s", len(pods), c.describeJob(done))
	}
	wantExits(t, &pods[0], map[string]exited{sidecarName: {0, 0}, "job": {0, 0}})
}

// sidecars is the pod's init containers with only the sidecar's volumes
// mounted: the service account's token volume, which every container of a
// pod gets, has a name of its own in each pod.
func sidecars(p *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range p.Spec.InitContainers {
		c.VolumeMounts = ourMounts(c.VolumeMounts)
		out = append(out, c)
	}
	return out
}

// ourMounts is a container's mounts of the sidecar's volumes, in order.
func ourMounts(ms []corev1.VolumeMount) []corev1.VolumeMount {
	var out []corev1.VolumeMount
	for _, m := range ms {
		if strings.HasPrefix(m.Name, "proxy-supervisor-") {
			out = append(out, m)
		}
	}
	return out
}

// ours is the volumes the sidecar brings, by name.
func ours(vs []corev1.Volume) map[string]corev1.Volume {
	m := map[string]corev1.Volume{}
	for _, v := range vs {
		if strings.HasPrefix(v.Name, "proxy-supervisor-") {
			m[v.Name] = v
		}
	}
	return m
}
