package kubelettest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The chart's release in the cluster: its name, the namespace it injects in
// (the chart's namespaceSelector; deploy/'s policies are kept out of it)
// and that holds helm's record of it.
const (
	helmRelease   = "ps-helm"
	helmNamespace = "ps-helm"
)

// helm runs the helm command line, deploytest's go.mod tool (built there
// under make test, so found in the build cache), in the node's network
// namespace, where the API server and the registry listen, against the
// suite's kubeconfig; its HOME is the test's, for the discovery cache that
// helm's Kubernetes client writes under ~/.kube.
func (c *cluster) helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := helmBinary()
	if err != nil {
		t.Fatalf("go tool -n helm (deploytest/go.mod): %v", err)
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"/usr/bin/env", "HOME=" + home, "HELM_CACHE_HOME=" + home + "/cache", "HELM_CONFIG_HOME=" + home + "/config", "HELM_DATA_HOME=" + home + "/data",
		bin, "--kubeconfig", c.kubeconfig}, args...)
	cmd := theNode.nsenter(ctx, argv...)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// helmBinary is helm's path, asked of the go command once.
var helmBinary = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "-C", "../deploytest", "tool", "-n", "helm").Output()
	return strings.TrimSpace(string(out)), err
})

// The chart installs through the real API server (helm install), pulled
// by digest from the node's registry, where make release pushed it, as are
// the images its policy injects; the suite first verifies their signatures
// there. Its values decide what a labelled Job's pod gets (the image, from
// the chart and not the pod's annotation, and the namespaces), the Job is
// injected, its sidecar pulled by digest, and completes, and helm
// uninstall leaves no policy, binding or release record behind, after
// which a pod is no longer injected.
func TestClusterHelm(t *testing.T) {
	t.Parallel()
	c := needCluster(t)
	rel := needRelease(t)
	theReport.of(t)
	ctx := context.Background()
	rel.verify(t)
	theReport.phase(t, "signatures verified")
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: helmNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.client.CoreV1().Namespaces().Delete(ctx, helmNamespace, metav1.DeleteOptions{}) }) //nolint:errcheck
	var cm corev1.ConfigMap
	readDeploy(t, "envoy-sidecar/envoy-config.yaml", &cm)
	cm.Namespace = helmNamespace
	if _, err := c.client.CoreV1().ConfigMaps(helmNamespace).Create(ctx, &cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// helm checks the chart's kubeVersion against the API server's own
	// (builds stamps it, as Kubernetes' release build does).
	if v, err := c.client.Discovery().ServerVersion(); err != nil || v.GitVersion != theVersion {
		t.Fatalf("the API server's version %+v (%v), want %s", v, err, theVersion)
	}
	chart, err := filepath.Abs("../charts/proxy-supervisor")
	if err != nil {
		t.Fatal(err)
	}
	// The release's Envoy image, as the registry/repository@digest the
	// chart composes: a platform team's mirror of the release.
	envoy := rel.images["envoy"]
	named, digest, _ := strings.Cut(envoy, "@")
	imageSet := "image.registry=" + filepath.Dir(named) + ",image.digest=" + digest
	if out, err := c.helm(t, "install", helmRelease, "oci://"+rel.chart, "--plain-http", "--namespace", helmNamespace,
		"--set", imageSet,
		"--set", `namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=`+helmNamespace); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	// The release's other images, pulled by digest and run (their
	// binary's version): a Job of their own, not injected.
	images := releaseImagesJob(rel)
	c.createJob(t, images)
	installed := true
	t.Cleanup(func() {
		if installed {
			c.helm(t, "uninstall", helmRelease, "--namespace", helmNamespace) //nolint:errcheck
		}
	})
	theReport.phase(t, "helm install")
	// The API server loads policies in the background: in effect once a
	// dry run of a pod that asks is injected with the chart's image.
	probe := askingPod("helm-probe")
	probe.Namespace = helmNamespace
	delete(probe.Annotations, annProxyImage)
	if err := proctest.Poll(time.Minute, func() error {
		p, err := c.dryRun(ctx, probe)
		if err != nil {
			return err
		}
		if !injected(p) {
			return fmt.Errorf("a pod in %s that asks is not injected yet", helmNamespace)
		}
		if img := sidecarImage(p); img != envoy {
			return fmt.Errorf("a pod in %s is injected with %s, not the chart's %s", helmNamespace, img, envoy)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The chart's namespaceSelector keeps it out of other namespaces: a pod
	// that asks in default is not given the chart's image (deploy/'s own
	// policy, when another test has installed it, injects its default).
	outside := askingPod("helm-probe-outside")
	delete(outside.Annotations, annProxyImage)
	if p, err := c.dryRun(ctx, outside); err != nil {
		t.Fatal(err)
	} else if injected(p) && sidecarImage(p) == envoy {
		t.Errorf("a pod in default was injected with the chart's image: its namespaceSelector did not apply")
	}
	// Every value set away from its default gives policies the API server
	// compiles and accepts (a server-side dry run, strictly decoded), under
	// another release's names.
	everyValue, err := c.helm(t, "template", "ps-every-value", chart, "--kube-version", theVersion,
		"--set", "image.registry=registry.example.com:5000/mirror,image.repository=ps/envoy,image.digest=sha256:"+strings.Repeat("ab", 32),
		"--set", "namespaceSelector.matchLabels.mesh=on,validation=true,peerRestartGuard=true",
		"--set", "defaults.proxyUID=1337,defaults.proxyCPU=250m,defaults.proxyMemory=96Mi,defaults.proxyMemoryLimit=256Mi",
		"--set-string", "defaults.peers=app\\,worker,defaults.drainMin=2s,defaults.drainTimeout=40s,defaults.appPorts=8080\\,9090")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, everyValue)
	}
	docs := yamlDocs(everyValue)
	for _, doc := range docs {
		if err := c.createStrict(ctx, policyResources[kindOf(doc)], doc, true); err != nil {
			t.Errorf("the chart with every value set: %s refused: %v", kindOf(doc), err)
		}
	}
	if len(docs) != 6 {
		t.Errorf("the chart with every value set renders %d objects, want 6", len(docs))
	}

	var job batchv1.Job
	readDeploy(t, policyDir+"/job.yaml", &job)
	job.Name, job.Namespace = "helm-job", helmNamespace
	job.Spec.BackoffLimit = ref[int32](0)
	askInjection(&job.Spec.Template.ObjectMeta)
	delete(job.Spec.Template.Annotations, annProxyImage) // the chart's image.*
	app := &job.Spec.Template.Spec.Containers[0]
	app.Image, app.ImagePullPolicy, app.Command = appImage, corev1.PullNever, []string{"/podapp", "get", hello}
	c.createJob(t, &job)
	done, _ := c.waitJob(t, helmNamespace, job.Name, clusterJobTimeout, batchv1.JobComplete)
	pods := c.jobPods(t, helmNamespace, job.Name)
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1:\n%s", len(pods), c.describeJob(done))
	}
	p := &pods[0]
	wantInjected(t, p)
	if img := sidecarImage(p); img != envoy {
		t.Errorf("the sidecar's image %q is not the chart's %s", img, envoy)
	}
	// Pulled from the node's registry by digest: the image the runtime
	// ran is the release's index (no node imports it).
	if s := status(p, sidecarName); s == nil || s.ImageID != envoy {
		t.Errorf("the sidecar's status %+v: want it to have run %s, pulled from the node's registry", s, envoy)
	}
	wantExits(t, p, map[string]exited{sidecarName: {0, 0}, "job": {0, 0}})
	c.wantNoFailedHook(t, p.Name)
	c.renderTimeJob(t, chart, imageSet, &job, p)
	theReport.phase(t, "render-time Job Complete")
	done, _ = c.waitJob(t, helmNamespace, images.Name, clusterJobTimeout, batchv1.JobComplete)
	if pods := c.jobPods(t, helmNamespace, images.Name); len(pods) != 1 {
		t.Errorf("%d pods, want 1:\n%s", len(pods), c.describeJob(done))
	} else {
		for _, ct := range images.Spec.Template.Spec.Containers {
			if s := status(&pods[0], ct.Name); s == nil || s.ImageID != ct.Image {
				t.Errorf("container %s's status %+v: want it to have run %s, pulled from the node's registry", ct.Name, s, ct.Image)
			}
		}
	}

	if out, err := c.helm(t, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "60s"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	installed = false
	theReport.phase(t, "helm uninstall")
	left := c.helmLeft(ctx)
	if len(left) > 0 {
		t.Errorf("helm uninstall left %q", left)
	}
	// Unloaded in the background too: a pod that asks is created as it
	// was written.
	if err := proctest.Poll(time.Minute, func() error {
		p, err := c.dryRun(ctx, probe)
		if err != nil {
			return err
		}
		if injected(p) {
			return fmt.Errorf("a pod in %s is still injected after helm uninstall", helmNamespace)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	note(t, "make release's chart and images verified and pulled by digest from the node's registry; helm install, a Job injected with the chart's image completes, the chart's render-time sidecar equals the policy's and its Job completes, helm uninstall leaves nothing")
}

// releaseImagesJob is a Job that runs the release's client and proxyv2
// images from the node's registry, by digest: each container prints its
// binary's version and ends.
func releaseImagesJob(rel release) *batchv1.Job {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "helm-release-images", Namespace: helmNamespace}}
	job.Spec.BackoffLimit = ref[int32](0)
	spec := &job.Spec.Template.Spec
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.Containers = []corev1.Container{
		{Name: "client", Image: rel.images["client"], Command: []string{"/proxy-supervisor", "version"}},
		{Name: "proxyv2", Image: rel.images["proxyv2"], Command: []string{"/usr/local/bin/proxy-supervisor", "version"}},
	}
	return job
}

// sidecarImage is the image of the pod's injected sidecar, or "".
func sidecarImage(p *corev1.Pod) string {
	if i := slices.IndexFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == sidecarName }); i >= 0 {
		return p.Spec.InitContainers[i].Image
	}
	return ""
}

// helmLeft names what of the release is still stored: its policies and
// bindings (named after it) and helm's release records (Secrets labelled
// owner=helm).
func (c *cluster) helmLeft(ctx context.Context) []string {
	var left []string
	for _, name := range []string{helmRelease + "-inject", helmRelease + "-peer-restart"} {
		for kind, resource := range policyResources {
			err := c.admissionClient(resource).Get().Resource(resource).Name(name).Do(ctx).Error()
			if !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("%s %s (%v)", kind, name, err))
			}
		}
	}
	secrets, err := c.client.CoreV1().Secrets(helmNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + helmRelease})
	switch {
	case err != nil:
		left = append(left, "helm's records: "+err.Error())
	case len(secrets.Items) > 0:
		left = append(left, fmt.Sprintf("%d helm release Secrets", len(secrets.Items)))
	}
	slices.Sort(left)
	return left
}
