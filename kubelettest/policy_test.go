package kubelettest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
	"github.com/proxy-supervisor/proxy-supervisor/kubelettest/internal/builds"
)

// What a pod asks for injection with, and what the policy injects
// (deploy/admission-policy/, docs/admission-policy.md).
const (
	injectLabel    = "proxy-supervisor.io/inject"
	sidecarName    = "proxy-supervisor"
	policyDir      = "admission-policy"
	annEnvoyConfig = "proxy-supervisor.io/envoy-config"
	annProxyImage  = "proxy-supervisor.io/proxy-image"
)

// askInjection labels and annotates a pod's metadata as a user does, with
// the suite's Envoy image (the fake Envoy at /usr/local/bin/envoy, the
// binary at /usr/local/bin/proxy-supervisor) and the envoy-sidecar
// ConfigMap, which the caller creates (envoyConfig).
func askInjection(meta *metav1.ObjectMeta) {
	meta.Labels = maps.Clone(meta.Labels)
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[injectLabel] = "true"
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[annEnvoyConfig] = "envoy-sidecar"
	meta.Annotations[annProxyImage] = envoyImage
}

// admissionPolicyOnce applies deploy/admission-policy/'s policies once
// for every test that needs them.
var (
	admissionPolicyOnce sync.Once
	admissionPolicyErr  error
)

// admissionPolicies applies the mutating and validating policies and
// their bindings with the suite's client, decoded strictly by the API
// server (fieldValidation=Strict), and waits until the API server injects:
// it loads policies asynchronously.
func (c *cluster) admissionPolicies(t *testing.T) {
	t.Helper()
	c.envoyConfig(t)
	admissionPolicyOnce.Do(func() { admissionPolicyErr = c.applyAdmissionPolicies() })
	if admissionPolicyErr != nil {
		t.Fatal(admissionPolicyErr)
	}
}

func (c *cluster) applyAdmissionPolicies() error {
	ctx := context.Background()
	// The API is GA and on by default since 1.36: the control plane is
	// started with no feature gate or runtime-config for it there (on 1.34
	// and 1.35 with the v1beta1 ones, apiServerFeatures). Say so plainly if
	// a build of the API server does not serve it.
	for _, r := range []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings", "validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
		gv := "admissionregistration.k8s.io/v1"
		if betaMutating() && strings.HasPrefix(r, "mutating") {
			gv += "beta1"
		}
		res, err := c.client.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			return fmt.Errorf("discovery of %s: %w", gv, err)
		}
		if !slices.ContainsFunc(res.APIResources, func(a metav1.APIResource) bool { return a.Name == r }) {
			return fmt.Errorf("the API server (Kubernetes %s) does not serve %s %s", theVersion, gv, r)
		}
	}
	// Sent as written, not through the typed client (which would drop
	// a field it does not know): the API server's strict decoding is what
	// checks them.
	for _, file := range []string{"mutating-policy.yaml", "validating-policy.yaml"} {
		docs, err := deployDocs(policyDir + "/" + file)
		if err != nil {
			return err
		}
		for _, doc := range docs {
			if doc, err = outsideHelmNamespace(forServedAPI(doc)); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if err := c.createStrict(ctx, policyResources[kindOf(doc)], doc, false); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	// In effect once a dry run of a pod that asks is injected, and one
	// with a bad annotation is refused.
	return proctest.Poll(time.Minute, func() error {
		p, err := c.dryRun(ctx, askingPod("policy-probe"))
		if err != nil {
			return err
		}
		if !injected(p) {
			return fmt.Errorf("a pod that asks is not injected yet")
		}
		bad := askingPod("policy-probe-bad")
		bad.Annotations["proxy-supervisor.io/proxy-uid"] = "root"
		if _, err := c.dryRun(ctx, bad); err == nil {
			return fmt.Errorf("a bad annotation is not refused yet")
		}
		return nil
	})
}

// policyResources are the admission API's resources, by kind.
var policyResources = map[string]string{
	"MutatingAdmissionPolicy": "mutatingadmissionpolicies", "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
	"ValidatingAdmissionPolicy": "validatingadmissionpolicies", "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}

// outsideHelmNamespace narrows an injection binding of deploy/'s to every
// namespace but helmNamespace, whose pods the chart's release injects
// (TestClusterHelm): otherwise the two policies would both match there, in
// an order the API server does not promise. The --peer-restart guard's
// binding, the same in both, is left to see every pod.
func outsideHelmNamespace(doc []byte) ([]byte, error) {
	var b struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &b); err != nil {
		return nil, err
	}
	if !strings.HasSuffix(b.Kind, "Binding") || b.Metadata.Name != "proxy-supervisor-inject" {
		return doc, nil
	}
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil || spec["matchResources"] != nil {
		return nil, fmt.Errorf("binding %s: no spec, or matchResources already set", b.Metadata.Name)
	}
	spec["matchResources"] = map[string]any{"namespaceSelector": map[string]any{"matchExpressions": []any{
		map[string]any{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": []any{helmNamespace}},
	}}}
	return yaml.Marshal(obj)
}

// deployDocs are the YAML documents of a manifest under deploy/.
func deployDocs(manifest string) ([][]byte, error) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", manifest))
	if err != nil {
		return nil, err
	}
	return yamlDocs(string(data)), nil
}

// yamlDocs are a YAML stream's documents that hold more than comments.
func yamlDocs(stream string) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(d, "")) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// createStrict creates the object of a YAML document as it is written,
// with fieldValidation=Strict: a field the API does not have is an error.
func (c *cluster) createStrict(ctx context.Context, resource string, doc []byte, dryRun bool) error {
	if resource == "" {
		return fmt.Errorf("not an admission policy or binding: %s", kindOf(doc))
	}
	body, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	req := c.admissionClient(resource).Post().Resource(resource).Param("fieldValidation", "Strict").
		SetHeader("Content-Type", "application/json").Body(body)
	if dryRun {
		req = req.Param("dryRun", "All")
	}
	return req.Do(ctx).Error()
}

func kindOf(doc []byte) string {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err.Error()
	}
	return meta.Kind
}

// askingPod is a bare pod that asks for injection, its app `podapp sleep`.
func askingPod(name string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: appImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/podapp", "sleep", "1h"},
		}}},
	}
	askInjection(&p.ObjectMeta)
	return p
}

// dryRun creates the pod with dryRun=All: through every admission plugin,
// nothing stored. It returns the pod as the API server would have stored
// it.
func (c *cluster) dryRun(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	return c.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

// injected says whether the pod has the policy's sidecar.
func injected(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == sidecarName })
}

// wantInjected asserts the pod as the policy makes it: one sidecar, first
// among the init containers, a native one; no install container; its four
// volumes once each; each app container's two mounts and the supervisor's
// uid once each.
func wantInjected(t *testing.T, p *corev1.Pod) {
	t.Helper()
	var names []string
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		names = append(names, c.Name)
	}
	init := p.Spec.InitContainers
	if len(init) == 0 || init[0].Name != sidecarName || init[0].RestartPolicy == nil || *init[0].RestartPolicy != corev1.ContainerRestartPolicyAlways ||
		slices.Index(names[1:], sidecarName) >= 0 || slices.Contains(names, "install") {
		t.Fatalf("pod %s: containers %q, want one native sidecar %s first and no install container", p.Name, names, sidecarName)
	}
	count := func(vs []string, prefix string) int {
		n := 0
		for _, v := range vs {
			if strings.HasPrefix(v, prefix) {
				n++
			}
		}
		return n
	}
	var volumes []string
	for _, v := range p.Spec.Volumes {
		volumes = append(volumes, v.Name)
	}
	if n := count(volumes, "proxy-supervisor-"); n != 4 || len(volumes) != len(slices.Compact(slices.Sorted(slices.Values(volumes)))) {
		t.Fatalf("pod %s: volumes %q, want the policy's four once each", p.Name, volumes)
	}
	for _, c := range p.Spec.Containers {
		var mounts, env []string
		for _, m := range c.VolumeMounts {
			mounts = append(mounts, m.Name)
		}
		for _, e := range c.Env {
			env = append(env, e.Name)
		}
		if count(mounts, "proxy-supervisor-") != 2 || count(env, "PROXY_SUPERVISOR_SUPERVISOR_UID") != 1 {
			t.Fatalf("pod %s: container %s mounts %q and env %q, want the bin and control volumes and PROXY_SUPERVISOR_SUPERVISOR_UID once each", p.Name, c.Name, mounts, env)
		}
	}
}

// The admission policy through the real API server: applied with the
// suite's client and decoded strictly; a labelled Job is injected by the
// API server and completes with its app's code, its app's request going
// through Envoy; an unlabelled pod and a pod injected already are left as
// they are; a bad annotation is refused at creation with its name in the
// message; an unknown field in the policy is refused. The Deployment
// injected and rolled under load is TestClusterRollout's roll-policy.
func TestClusterAdmissionPolicy(t *testing.T) {
	t.Parallel()
	c := needCluster(t)
	c.admissionPolicies(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		app  []string
		want batchv1.JobConditionType
		code int32
	}{
		{"policy-job-ok", []string{"/podapp", "get", hello}, batchv1.JobComplete, 0},
		{"policy-job-fail", []string{"/podapp", "get", hello, "exit", "3"}, batchv1.JobFailed, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var job batchv1.Job
			readDeploy(t, policyDir+"/job.yaml", &job)
			job.Name, job.Namespace = tc.name, "default"
			job.Spec.BackoffLimit = ref[int32](0)
			askInjection(&job.Spec.Template.ObjectMeta)
			app := &job.Spec.Template.Spec.Containers[0]
			app.Image, app.ImagePullPolicy, app.Command = appImage, corev1.PullNever, tc.app
			c.createJob(t, &job)
			done, _ := c.waitJob(t, "default", tc.name, clusterJobTimeout, tc.want)
			pods := c.jobPods(t, "default", tc.name)
			if len(pods) != 1 {
				t.Fatalf("%d pods, want 1:\n%s", len(pods), c.describeJob(done))
			}
			p := &pods[0]
			wantInjected(t, p)
			wantExits(t, p, map[string]exited{sidecarName: {0, 0}, "job": {tc.code, 0}})
			c.wantNoFailedHook(t, p.Name)
			note(t, "injected by the API server: one container, no install; the app's code %d", tc.code)
		})
	}
	t.Run("policy-unlabelled", func(t *testing.T) {
		theReport.of(t)
		p := askingPod("policy-unlabelled")
		delete(p.Labels, injectLabel)
		got := c.createPod(t, p)
		if len(got.Spec.InitContainers) != 0 || slices.ContainsFunc(got.Spec.Volumes, func(v corev1.Volume) bool { return strings.HasPrefix(v.Name, "proxy-supervisor-") }) ||
			len(got.Spec.Containers[0].Env) != 0 {
			t.Fatalf("an unlabelled pod was changed: %+v", got.Spec)
		}
		note(t, "left as it was")
	})
	t.Run("policy-already-injected", func(t *testing.T) {
		theReport.of(t)
		// The pod as the policy made it, created again: a pod injected
		// already, as a reinvocation or a copied spec presents it.
		once, err := c.dryRun(ctx, askingPod("policy-again"))
		if err != nil {
			t.Fatal(err)
		}
		wantInjected(t, once)
		again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: once.Name, Namespace: once.Namespace, Labels: once.Labels, Annotations: once.Annotations}, Spec: once.Spec}
		got := c.createPod(t, again)
		wantInjected(t, got)
		if len(got.Spec.InitContainers) != len(once.Spec.InitContainers) || len(got.Spec.Volumes) != len(once.Spec.Volumes) {
			t.Fatalf("injected twice: %d init containers and %d volumes, were %d and %d", len(got.Spec.InitContainers), len(got.Spec.Volumes), len(once.Spec.InitContainers), len(once.Spec.Volumes))
		}
		note(t, "not injected twice")
	})
	t.Run("policy-refused", func(t *testing.T) {
		theReport.of(t)
		for _, bad := range []struct {
			annotation, value string
			grace             int64
		}{
			{annEnvoyConfig, "", 0}, // absent
			{annEnvoyConfig, "Not_A_Name", 0},
			{"proxy-supervisor.io/proxy-uid", "root", 0},
			{"proxy-supervisor.io/proxy-cpu", "lots", 0},
			{"proxy-supervisor.io/proxy-memory-limit", "1 GB", 0},
			{"proxy-supervisor.io/drain-min", "5 seconds", 0},
			{"proxy-supervisor.io/drain-timeout", "20", 0},
			{"proxy-supervisor.io/app-ports", "8080,http", 0},
			{"proxy-supervisor.io/peers", "Job!", 0},
			{"terminationGracePeriodSeconds", "", 5},
		} {
			p := askingPod("policy-refused")
			switch {
			case bad.grace > 0:
				p.Spec.TerminationGracePeriodSeconds = &bad.grace
			case bad.value == "":
				delete(p.Annotations, bad.annotation)
			default:
				p.Annotations[bad.annotation] = bad.value
			}
			_, err := c.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			if err == nil {
				c.client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ref[int64](0)}) //nolint:errcheck
				t.Fatalf("%s=%q: the pod was created", bad.annotation, bad.value)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), bad.annotation) {
				t.Fatalf("%s=%q: refused with %v, want Invalid naming %s", bad.annotation, bad.value, err, bad.annotation)
			}
			t.Logf("%s=%q: %v", bad.annotation, bad.value, err)
		}
		note(t, "10 bad settings refused, each naming itself")
	})
	t.Run("policy-peer-restart", func(t *testing.T) {
		theReport.of(t)
		needMinor(t, 35, "containers' restartPolicyRules")
		// Injected: the app's own policy and rule reach the supervisor.
		asking := askingPod("policy-peer-restart")
		ruled(&asking.Spec.Containers[0])
		p, err := c.dryRun(ctx, asking)
		if err != nil {
			t.Fatalf("a labelled pod with restart rules: %v", err)
		}
		wantInjected(t, p)
		if want := "--peer-restart=app=Never,Restart:In(42,43)"; !slices.Contains(p.Spec.InitContainers[0].Command, want) {
			t.Fatalf("the injected supervisor's command %q lacks %s", p.Spec.InitContainers[0].Command, want)
		}
		// A rule without codes (values is optional): NotIn() matches
		// every exit.
		// (RestartAllContainers from 1.36; 1.35 knows Restart alone.)
		action := corev1.ContainerRestartRuleActionRestartAllContainers
		if builds.Minor() < 36 {
			action = corev1.ContainerRestartRuleActionRestart
		}
		asking = askingPod("policy-peer-restart-notin")
		ruled(&asking.Spec.Containers[0])
		asking.Spec.Containers[0].RestartPolicyRules = append(asking.Spec.Containers[0].RestartPolicyRules, corev1.ContainerRestartRule{
			Action: action, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn}})
		if p, err = c.dryRun(ctx, asking); err != nil {
			t.Fatalf("a labelled pod with a rule without codes: %v", err)
		}
		if want := "--peer-restart=app=Never,Restart:In(42,43)," + string(action) + ":NotIn()"; !slices.Contains(p.Spec.InitContainers[0].Command, want) {
			t.Fatalf("the injected supervisor's command %q lacks %s", p.Spec.InitContainers[0].Command, want)
		}
		// A container with rules that is no peer (proxy-supervisor.io/peers
		// lists the app alone): the kubelet's restarts of it decide
		// nothing, and the pod is accepted without the flag.
		asking = askingPod("policy-peer-restart-warmer")
		asking.Annotations["proxy-supervisor.io/peers"] = "app"
		warmer := asking.Spec.Containers[0]
		warmer.Name = "warmer"
		ruled(&warmer)
		asking.Spec.Containers = append(asking.Spec.Containers, warmer)
		if p, err = c.dryRun(ctx, asking); err != nil {
			t.Fatalf("a labelled pod whose ruled container is no peer: %v", err)
		}
		if cmd := p.Spec.InitContainers[0].Command; slices.ContainsFunc(cmd, func(a string) bool { return strings.HasPrefix(a, "--peer-restart") }) {
			t.Fatalf("the injected supervisor's command %q has --peer-restart for a container that is no peer", cmd)
		}
		// Written by hand, unlabelled: refused without the flag, naming
		// it, and accepted with it.
		pod := podFrom(t, "job.yaml", "policy-peer-restart-classic", "/podapp", "get", hello)
		ruled(container(pod, "job"))
		// The API server loads a policy asynchronously: until it does,
		// the pod is accepted.
		if err := proctest.Poll(time.Minute, func() error {
			_, err = c.dryRun(ctx, pod)
			if err == nil {
				return errNotYet
			}
			return nil
		}); err != nil {
			t.Fatalf("a classic pod with restart rules and no --peer-restart is accepted after 1m")
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "lacks --peer-restart") || !strings.Contains(err.Error(), "container job has its own restartPolicy") {
			t.Fatalf("a classic pod with restart rules and no --peer-restart: %v, want Invalid naming the flag and the container", err)
		}
		t.Logf("refused: %v", err)
		envoy := container(pod, "envoy")
		envoy.Command = slices.Insert(envoy.Command, slices.Index(envoy.Command, "--"), "--peer-restart=job=Never,Restart:In(42,43)")
		if _, err := c.dryRun(ctx, pod); err != nil {
			t.Fatalf("the same pod with --peer-restart: %v", err)
		}
		note(t, "the injection fills --peer-restart; a hand-written pod without it is refused, naming it")
	})
	t.Run("policy-strict", func(t *testing.T) {
		theReport.of(t)
		// The policies were created with fieldValidation=Strict; a field
		// the API does not have must then be refused, or that proves
		// nothing.
		docs, err := deployDocs(policyDir + "/mutating-policy.yaml")
		if err != nil {
			t.Fatal(err)
		}
		probe := strings.Replace(string(docs[0]), "name: proxy-supervisor-inject\n", "name: proxy-supervisor-strict-probe\n", 1)
		probe = strings.Replace(probe, "\nspec:\n", "\nspec:\n  reinvocationPolicyy: Never\n", 1)
		err = c.createStrict(ctx, "mutatingadmissionpolicies", forServedAPI([]byte(probe)), true)
		if err == nil || !strings.Contains(err.Error(), `unknown field "spec.reinvocationPolicyy"`) {
			t.Fatalf("a policy with an unknown field: %v, want it refused", err)
		}
		note(t, "strict decoding: the shipped objects accepted, an unknown field refused")
	})
}

// ruled gives an app container restartPolicy Never and a Restart rule on
// the exit codes 42 and 43.
func ruled(c *corev1.Container) {
	c.RestartPolicy = ref(corev1.ContainerRestartPolicyNever)
	c.RestartPolicyRules = []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42, 43}},
	}}
}

// createPod creates a pod, returns it as stored, and deletes it at once:
// the tests that use it look at what admission made of it.
func (c *cluster) createPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	got, err := c.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
	t.Cleanup(func() {
		c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ref[int64](0)}) //nolint:errcheck
	})
	return got
}

// wantDeploymentInjected asserts that every pod of the Deployment was
// injected by the API server.
func (c *cluster) wantDeploymentInjected(t *testing.T, name string) {
	t.Helper()
	pods, err := c.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		wantInjected(t, &pods.Items[i])
	}
}
