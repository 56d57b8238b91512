package kubelettest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// fakeEnvoy replaces the manifests' `envoy -c /etc/envoy/envoy.yaml`: the
// same admin address (a unix socket in the envoy-admin volume) and the
// listener on :8000 that answers /hello.
var fakeEnvoy = []string{"/fake-envoy", "--config-yaml", "admin: {address: {pipe: {path: /var/run/envoy/admin.sock}}}",
	"--listener", "inbound=0.0.0.0:8000,inbound", "--log-level", "warning"}

const hello = "http://127.0.0.1:8000/hello"

// podFrom makes a static pod named name from a deploy/envoy-sidecar
// manifest (a Job's or a Deployment's pod template), adapted to the node:
// its images, imagePullPolicy Never, the fake Envoy as the proxy, no
// ConfigMap (a static pod cannot use one), and app as the app's command
// (after `proxy-supervisor exec ... --` when the manifest wraps it).
func podFrom(t *testing.T, manifest, name string, app ...string) *corev1.Pod {
	t.Helper()
	return fromDeploy(t, filepath.Join("envoy-sidecar", manifest), name, app...)
}

// fromDeploy is podFrom for any manifest under deploy/: an Istio form's
// istio-proxy (image auto) becomes the real pilot-agent (istioProxy).
func fromDeploy(t *testing.T, manifest, name string, app ...string) *corev1.Pod {
	t.Helper()
	// Jobs and Deployments alike: the pod is spec.template.
	var tmpl corev1.PodTemplateSpec
	switch kind := deployKind(t, manifest); kind {
	case "Job":
		var job batchv1.Job
		readDeploy(t, manifest, &job)
		tmpl = job.Spec.Template
	case "Deployment":
		var d appsv1.Deployment
		readDeploy(t, manifest, &d)
		tmpl = d.Spec.Template
	default:
		t.Fatalf("%s: a %s, not a Job or Deployment", manifest, kind)
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: tmpl.ObjectMeta,
		Spec:       tmpl.Spec,
	}
	pod.Name, pod.Namespace = name, "default"
	adaptPod(t, pod, app...)
	return pod
}

// readDeploy reads the first object of a manifest under deploy/ into obj,
// strictly as deploytest reads them all: a field obj's type does not have
// is an error, not a setting the pod silently goes without.
func readDeploy(t *testing.T, manifest string, obj any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(firstDoc(t, manifest), obj); err != nil {
		t.Fatalf("%s: %v", manifest, err)
	}
}

// deployKind is the kind of the first object of a manifest under deploy/,
// which says the type readDeploy reads it into.
func deployKind(t *testing.T, manifest string) string {
	t.Helper()
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(firstDoc(t, manifest), &meta); err != nil {
		t.Fatalf("%s: %v", manifest, err)
	}
	return meta.Kind
}

func firstDoc(t *testing.T, manifest string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "deploy", manifest))
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(data), "\n---\n")
	return []byte(doc)
}

// adaptPod adapts a deploy/ form's pod to the node (see fromDeploy).
func adaptPod(t *testing.T, pod *corev1.Pod, app ...string) {
	t.Helper()
	name := pod.Name
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil })
	adapt := func(c *corev1.Container) {
		c.ImagePullPolicy = corev1.PullNever
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "envoy-config" })
		switch {
		case strings.HasPrefix(c.Image, "envoyproxy/envoy"):
			c.Image = envoyImage
			c.Command = append(beforeDashes(c.Command), fakeEnvoy...)
		case c.Image == shippedEnvoyImage:
			// images/envoy.Dockerfile's, as built from images/: its base
			// has the fake Envoy where Envoy's image has envoy.
			c.Command = append(beforeDashes(c.Command), fakeEnvoy...)
		case c.Image == "auto": // Istio fills in its proxy image
			istioProxy(t, pod, c)
		case strings.HasPrefix(c.Image, "busybox"):
			c.Image = appImage
			if len(app) == 0 {
				t.Fatalf("%s: no command for the app", name)
			}
			if strings.HasSuffix(c.Command[0], "/proxy-supervisor") {
				c.Command = append(beforeDashes(c.Command), app...)
			} else {
				c.Command = app
			}
			// busybox's `sleep N`; the app image has only podapp.
			if h := lifecyclePreStop(c); h != nil && h.Exec != nil && h.Exec.Command[0] == "sleep" {
				h.Exec.Command = []string{"/podapp", "sleep", h.Exec.Command[1] + "s"}
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		adapt(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		adapt(&pod.Spec.Containers[i])
	}
}

// beforeDashes is argv up to and including "--".
func beforeDashes(argv []string) []string {
	i := slices.Index(argv, "--")
	return slices.Clone(argv[:i+1])
}

func lifecyclePreStop(c *corev1.Container) *corev1.LifecycleHandler {
	if c.Lifecycle == nil {
		return nil
	}
	return c.Lifecycle.PreStop
}

// container is the named container, init or not.
func container(pod *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

// run writes pod as a static pod manifest; the test's cleanup deletes it.
func (n *node) run(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	theReport.of(t)
	data, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(n.manifests(), pod.Name+".json")
	// Written beside the directory and renamed in: the kubelet must never
	// read half a manifest.
	tmp := filepath.Join(n.dir, pod.Name+".json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.delete(pod.Name) })
}

// delete deletes a static pod: the kubelet stops it as a pod deletion.
func (n *node) delete(name string) {
	os.Remove(filepath.Join(n.manifests(), name+".json"))
}

// pod is the kubelet's view of a static pod, nil while it has none.
func (n *node) pod(name string) (*corev1.Pod, error) {
	pods, err := n.pods()
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].Name == name+"-"+nodeName {
			return &pods[i], nil
		}
	}
	return nil, nil
}

// waitPod waits up to timeout for the kubelet to report the pod in a state
// that ok accepts, and returns it.
func (n *node) waitPod(t *testing.T, name string, timeout time.Duration, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := proctest.Poll(timeout, func() error {
		p, err := n.pod(name)
		if err != nil {
			return err
		}
		last = p
		if p != nil {
			theReport.phase(t, string(p.Status.Phase))
		}
		if p == nil || !ok(p) {
			return fmt.Errorf("not %s", what)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod %s: %v after %s; last seen:\n%s", name, err, timeout, describe(last))
	}
	return last
}

// waitPhase waits for a final phase (Succeeded or Failed) and asserts it.
func (n *node) waitPhase(t *testing.T, name string, timeout time.Duration, want corev1.PodPhase) *corev1.Pod {
	t.Helper()
	p := n.waitPod(t, name, timeout, "finished", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	if p.Status.Phase != want {
		t.Fatalf("pod %s: phase %s, want %s:\n%s", name, p.Status.Phase, want, describe(p))
	}
	return p
}

// statuses are the pod's container statuses, init containers' included.
func statuses(p *corev1.Pod) []corev1.ContainerStatus {
	return slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
}

func status(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, s := range statuses(p) {
		if s.Name == name {
			return &s
		}
	}
	return nil
}

// exited is what a container's status says of how it ended.
type exited struct {
	Code     int32
	Restarts int32
}

// wantExits asserts every container of the pod has terminated with the
// code, and the restart count, given.
func wantExits(t *testing.T, p *corev1.Pod, want map[string]exited) {
	t.Helper()
	theReport.exits(t, p)
	got := map[string]exited{}
	for _, s := range statuses(p) {
		e := exited{Code: -1, Restarts: s.RestartCount}
		if s.State.Terminated != nil {
			e.Code = s.State.Terminated.ExitCode
		}
		got[s.Name] = e
	}
	if !maps.Equal(got, want) {
		t.Fatalf("pod %s: exits (code, restarts) %v, want %v:\n%s", p.Name, got, want, describe(p))
	}
	t.Logf("pod %s: %s, exits (code, restarts) %v", p.Name, p.Status.Phase, got)
}

// describe is a pod's status for a failure message.
func describe(p *corev1.Pod) string {
	if p == nil {
		return "(no pod)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s %s %s\n", p.Status.Phase, p.Status.Reason, p.Status.Message)
	for _, s := range statuses(p) {
		st, _ := json.Marshal(s.State)
		last, _ := json.Marshal(s.LastTerminationState)
		fmt.Fprintf(&b, "  %s: restarts %d state %s last %s\n", s.Name, s.RestartCount, st, last)
	}
	return b.String()
}

// logs is what a container of a pod has written, from the kubelet's API:
// its first and last MiB (a proctest.Buffer), since what a container logs
// grows with how long it runs, and a fault can make it log without end.
func (n *node) logs(t *testing.T, name, container string) string {
	t.Helper()
	logs, err := n.logsOf(name, container)
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// logsOf is logs, with an error instead of a failed test: for what a
// failure's message adds.
func (n *node) logsOf(name, container string) (string, error) {
	return n.podLogs(name+"-"+nodeName, container)
}

// podLogs are the logs of a container of the pod named pod (a static
// pod's name ends in the node's), as the kubelet serves them.
func (n *node) podLogs(pod, container string) (string, error) {
	resp, err := n.client.Get(fmt.Sprintf("https://127.0.0.1:10250/containerLogs/default/%s/%s", pod, container))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body proctest.Buffer
	_, err = io.Copy(&body, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("the logs of %s in pod %s: %s %v: %s", container, pod, resp.Status, err, body.String())
	}
	return body.String(), nil
}
