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
	"sigs.k8s.io/yaml"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// installFirst is the policy that puts the template's install container
// back before a native istio-proxy (deploy/istio/install-first.yaml).
const installFirst = "istio/install-first.yaml"

// A native istio-proxy on Istio's proxyv2 unchanged, through the API
// server: the Job's pod comes in as Istio's injection leaves a
// native-delivery: install pod (istio-proxy, an init container with
// restartPolicy Always, ahead of the install container that copies the
// binary it runs), install-first.yaml's policy moves the install container
// before it, and the Job completes: the binary copied from the client
// image ran pilot-agent, the app passed through its Envoy, and every
// container exited 0. Without the policy the pod would wait in Init:
// istio-proxy's command is the binary that is not copied yet.
func TestClusterIstioInstallFirst(t *testing.T) {
	t.Parallel()
	c := needCluster(t)
	needPilotAgent(t)
	ctx := context.Background()
	docs, err := deployDocs(installFirst)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		kind := kindOf(doc)
		resource := policyResources[kind]
		if err := c.createStrict(ctx, resource, forServedAPI(doc), false); err != nil {
			t.Fatalf("%s: %s: %v", installFirst, kind, err)
		}
		var obj metav1.PartialObjectMetadata
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		name := obj.Name
		t.Cleanup(func() {
			c.admissionClient(resource).Delete().Resource(resource).Name(name).Do(ctx) //nolint:errcheck // the cluster ends with the suite
		})
	}

	const name = "istio-install-first"
	var job batchv1.Job
	readDeploy(t, "istio/job-override.yaml", &job)
	job.Name, job.Namespace = name, "default"
	adaptTemplate(t, &job.Spec.Template, name, "/podapp", "get", hello)
	pod := &corev1.Pod{Spec: job.Spec.Template.Spec}
	nativeInstalled(t, pod)
	job.Spec.Template.Spec = pod.Spec
	if got := initNames(pod); !slices.Equal(got, []string{"istio-proxy", "proxy-supervisor-install"}) {
		t.Fatalf("the pod as Istio leaves it: init containers %q", got)
	}

	// The API server loads a policy asynchronously: until a dry run of the
	// pod comes back reordered, a Job's pod could be created unmoved.
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-probe", Namespace: "default"}, Spec: pod.Spec}
	want := []string{"proxy-supervisor-install", "istio-proxy"}
	if err := proctest.Poll(time.Minute, func() error {
		p, err := c.dryRun(ctx, probe)
		if err != nil {
			return err
		}
		if got := initNames(p); !slices.Equal(got, want) {
			return fmt.Errorf("a dry run's init containers %q, want %q: the policy is not in effect yet", got, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	c.createJob(t, &job)
	done, _ := c.waitJob(t, "default", name, clusterJobTimeout, batchv1.JobComplete)
	pods := c.jobPods(t, "default", name)
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1:\n%s", len(pods), c.describeJob(done))
	}
	p := &pods[0]
	if got := initNames(p); !slices.Equal(got, want) {
		t.Fatalf("pod %s as stored: init containers %q, want %q", p.Name, got, want)
	}
	if img := container(p, "istio-proxy").Image; img != istioBase {
		t.Fatalf("istio-proxy runs %s, want Istio's own proxyv2 %s", img, istioBase)
	}
	wantExits(t, p, map[string]exited{"proxy-supervisor-install": {0, 0}, "istio-proxy": {0, 0}, "job": {0, 0}})
	t.Logf("pod %s events: %s", p.Name, strings.Join(c.wantNoFailedHook(t, p.Name), " "))
	logs, err := theNode.podLogs(p.Name, "istio-proxy")
	if err != nil {
		t.Fatal(err)
	}
	if want := "Envoy command: [-c etc/istio/proxy/envoy-rev.json"; !strings.Contains(logs, want) {
		t.Fatalf("istio-proxy's log lacks %q: pilot-agent did not run Envoy under the copied binary:\n%s", want, logs)
	}
}

// nativeInstalled makes job-override.yaml's pod what Istio leaves of a
// native-delivery: install pod: istio-proxy a native sidecar on Istio's
// proxyv2, running the binary from the install container's emptyDir (no
// --install), moved ahead of every init container (Istio's reorderPod).
func nativeInstalled(t *testing.T, p *corev1.Pod) {
	t.Helper()
	c := nativeIstio(t, p)
	if !strings.HasPrefix(c.Command[0], "/opt/proxy-supervisor/bin/") || c.Image != istioBase {
		t.Fatalf("istio-proxy runs %s in %s, want the copied binary in Istio's own proxyv2", c.Command[0], c.Image)
	}
	supervisedNatively(c)
	last := len(p.Spec.InitContainers) - 1 // where nativeIstio put it
	proxy := p.Spec.InitContainers[last]
	p.Spec.InitContainers = slices.Insert(p.Spec.InitContainers[:last], 0, proxy)
}

// initNames are the names of the pod's init containers, in order.
func initNames(p *corev1.Pod) []string {
	var names []string
	for _, c := range p.Spec.InitContainers {
		names = append(names, c.Name)
	}
	return names
}
