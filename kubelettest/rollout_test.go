package kubelettest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// proxyForm is how a rollout's pods run their proxy.
type proxyForm string

const (
	// classic is deployment.yaml as shipped: the supervisor in a regular
	// container, its postStart and preStop hooks.
	classic proxyForm = "classic"
	// native is deployment.yaml with the proxy as a native sidecar, its
	// hooks and probes as job-native-sidecar.yaml has them (its postStart
	// wait, no startupProbe); it keeps deployment.yaml's install init
	// container and Envoy's image, where the shipped native form is one
	// container (--install), which policy's pods measure.
	native proxyForm = "native"
	// pilotAgentOnly is the baseline: Istio's sidecar as Istio runs it
	// without this project, pilot-agent the entrypoint with its default
	// termination drain (5 s), no hook.
	pilotAgentOnly proxyForm = "pilot-agent"
	// policy is deployment.yaml without its proxy, asking the admission
	// policy for one (deploy/admission-policy/): the API server injects
	// its one native sidecar.
	policy proxyForm = "policy"
	// pilotAgentZero is the baseline a careful Istio user configures:
	// pilot-agent with EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true and its
	// MINIMUM_DRAIN_DURATION default (5 s): it drains, sleeps the minimum,
	// then polls Envoy's active connections every second until none is
	// left, with no bound but the grace period.
	pilotAgentZero proxyForm = "pilot-agent-exit-on-zero"
	// istioNative is Istio's native-sidecar lifecycle as its injector
	// renders it (injection-template.yaml, nativeSidecar): istio-proxy a
	// restartable init container whose preStop is `pilot-agent request
	// --debug-port=15020 POST drain` (drain_listeners?inboundonly&graceful&
	// skip_exit, then nothing more until the kubelet's SIGTERM, which comes
	// once the app has exited), its probes on :15021.
	istioNative proxyForm = "istio-native"
)

// envoyConfigOnce creates deploy/envoy-sidecar/envoy-config.yaml's
// ConfigMap, which the fake Envoy reads as Envoy would: its listener
// forwards to the app.
var envoyConfigOnce sync.Once

func (c *cluster) envoyConfig(t *testing.T) {
	t.Helper()
	var err error
	envoyConfigOnce.Do(func() {
		var cm corev1.ConfigMap
		readDeploy(t, "envoy-sidecar/envoy-config.yaml", &cm)
		cm.Namespace = "default"
		_, err = c.client.CoreV1().ConfigMaps("default").Create(context.Background(), &cm, metav1.CreateOptions{})
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// deploymentFrom is deploy/envoy-sidecar/deployment.yaml named name, with
// replicas pods, in the form given, its app `podapp serve` listening after
// startup and kept serving preStop after the deletion (the form's `sleep
// 5`, or longer).
func deploymentFrom(t *testing.T, name string, replicas int32, form proxyForm, startup, preStop time.Duration, flags ...string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	readDeploy(t, "envoy-sidecar/deployment.yaml", &d)
	d.Name, d.Namespace = name, "default"
	d.Spec.Replicas = &replicas
	labels := map[string]string{"app": name}
	d.Spec.Selector.MatchLabels, d.Spec.Template.Labels = labels, labels
	spec := &d.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := &cs[i]
			c.ImagePullPolicy = corev1.PullNever
			switch {
			case strings.HasPrefix(c.Image, "envoyproxy/envoy"):
				// The fake Envoy reads the form's own bootstrap.
				c.Image = envoyImage
				i := slices.Index(c.Command, "--")
				if i < 0 || c.Command[i+1] != "envoy" {
					t.Fatalf("the proxy's command is not `... -- envoy ...`: %q", c.Command)
				}
				c.Command[i+1] = "/fake-envoy"
				c.Command = slices.Insert(c.Command, i, flags...)
			case strings.HasPrefix(c.Image, "busybox"):
				c.Image = appImage
				c.Command = []string{"/podapp", "sleep", startup.String(), "serve", "127.0.0.1:8080"}
				c.Lifecycle.PreStop.Exec.Command = []string{"/podapp", "sleep", preStop.String()}
			}
			loadedNode(c)
		}
	}
	switch form {
	case policy:
		spec.InitContainers = nil
		spec.Containers = slices.DeleteFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" })
		spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == "bin" || v.Name == "control" || v.Name == "envoy-config" || v.Name == "envoy-admin"
		})
		askInjection(&d.Spec.Template.ObjectMeta)
	case native:
		i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" })
		envoy := spec.Containers[i]
		spec.Containers = slices.Delete(spec.Containers, i, i+1)
		envoy.RestartPolicy = ref(corev1.ContainerRestartPolicyAlways)
		envoy.StartupProbe = nil // as job-native-sidecar.yaml: its postStart wait holds the app
		dashes := slices.Index(envoy.Command, "--")
		envoy.Command = slices.Insert(envoy.Command, dashes, "--native-sidecar")
		spec.InitContainers = append(spec.InitContainers, envoy)
	case pilotAgentOnly, pilotAgentZero, istioNative:
		i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" })
		pod := &corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: *spec}
		c := &corev1.Container{Name: "istio-proxy", Image: "auto", Ports: spec.Containers[i].Ports}
		// What Istio's injector gives a sidecar: its probes on pilot-agent's
		// status port, no hook.
		probe := func() *corev1.Probe {
			return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready", Port: intstr.FromInt32(15021)}}}
		}
		c.StartupProbe, c.ReadinessProbe = probe(), probe()
		istioProxy(t, pod, c)
		c.ImagePullPolicy = corev1.PullNever
		for j, e := range c.Env {
			if e.Name == "FAKE_ENVOY_FLAGS" {
				c.Env[j].Value = "--config-yaml " + inboundToApp(t)
			}
		}
		if form == pilotAgentZero {
			c.Env = append(c.Env, corev1.EnvVar{Name: "EXIT_ON_ZERO_ACTIVE_CONNECTIONS", Value: "true"})
		}
		// Nothing of this project's: no install, no control volume.
		pod.Spec.InitContainers = nil
		if form == istioNative {
			pod.Spec.Containers = slices.Delete(pod.Spec.Containers, i, i+1)
			c.RestartPolicy = ref(corev1.ContainerRestartPolicyAlways)
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
				Command: []string{"/usr/local/bin/pilot-agent", "request", "--debug-port=15020", "POST", "drain"}}}}
			pod.Spec.InitContainers = []corev1.Container{*c}
		} else {
			pod.Spec.Containers[i] = *c
		}
		pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == "bin" || v.Name == "control" || v.Name == "envoy-config"
		})
		*spec = pod.Spec
	}
	return &d
}

// istioEnvoy gives a classic Deployment's Envoy the drain strategy Istio
// gives its own (see TestClusterRollout's istio).
func istioEnvoy(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	spec := &d.Spec.Template.Spec
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" })
	if i < 0 {
		t.Fatal("deployment.yaml: no envoy container")
	}
	spec.Containers[i].Command = append(spec.Containers[i].Command, "--drain-strategy", "immediate")
}

// probeTimeout is the probes' timeoutSeconds on this node: the suite's own
// pods put its 1-minute load near 50 on 2 cores, where the default 1 s
// times out (the kubelet's prober, Envoy and the app all wait for a CPU),
// and three timeouts in a row take a pod that serves out of its
// endpoints. A user on such a node sets what Istio's injector sets (3 s)
// or more.
const probeTimeout = 5

// loadedNode gives the container's startup and readiness probes the
// timeout a loaded node needs, where they keep the default.
func loadedNode(c *corev1.Container) {
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe} {
		if p != nil && p.TimeoutSeconds == 0 {
			p.TimeoutSeconds = probeTimeout
		}
	}
}

// probeFailures are the kubelet's Unhealthy events about the Deployment's
// pods (name-HASH-ID), which say why a pod left the ready endpoints: a
// drain's 503, expected of a terminating pod, or a probe that timed out.
func (c *cluster) probeFailures(t *testing.T, name string) []string {
	t.Helper()
	list, err := c.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Unhealthy"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		rest, ok := strings.CutPrefix(e.InvolvedObject.Name, name+"-")
		if !ok || strings.Count(rest, "-") != 1 {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s ×%d from %s to %s: %s", e.InvolvedObject.Name, e.InvolvedObject.FieldPath, e.Count,
			e.FirstTimestamp.Format(time.TimeOnly), e.LastTimestamp.Format(time.TimeOnly), e.Message))
	}
	slices.Sort(out)
	return out
}

// inboundToApp is the bootstrap part that Istio's xDS would give the
// baseline's Envoy: an inbound listener on :8000 forwarding to the app on
// 127.0.0.1:8080, as compact JSON (which is YAML) for FAKE_ENVOY_FLAGS,
// which is split at spaces.
func inboundToApp(t *testing.T) string {
	t.Helper()
	addr := func(host string, port int) map[string]any {
		return map[string]any{"socket_address": map[string]any{"address": host, "port_value": port}}
	}
	cfg := map[string]any{"static_resources": map[string]any{
		"listeners": []any{map[string]any{
			"name": "inbound", "address": addr("0.0.0.0", 8000), "traffic_direction": "INBOUND",
			"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
				"name": "envoy.filters.network.http_connection_manager",
				"typed_config": map[string]any{
					"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
					"stat_prefix": "inbound",
					"http_filters": []any{map[string]any{"name": "envoy.filters.http.router",
						"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}},
					"route_config": map[string]any{"virtual_hosts": []any{map[string]any{
						"name": "app", "domains": []string{"*"},
						"routes": []any{map[string]any{"match": map[string]any{"prefix": "/"}, "route": map[string]any{"cluster": "inbound-app"}}},
					}}},
				},
			}}}},
		}},
		"clusters": []any{map[string]any{
			"name": "inbound-app", "type": "STATIC", "connect_timeout": "1s",
			"load_assignment": map[string]any{"cluster_name": "inbound-app", "endpoints": []any{map[string]any{
				"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": addr("127.0.0.1", 8080)}}},
			}}},
		}},
	}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rolledOut is nil once the Deployment's every pod is of its latest
// template, available, and no pod of an older one is left, terminating or
// not.
func (c *cluster) rolledOut(ctx context.Context, name string) error {
	d, err := c.client.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	want := *d.Spec.Replicas
	s := d.Status
	if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != want || s.AvailableReplicas != want || s.Replicas != want {
		return fmt.Errorf("Deployment %s: generation %d observed %d, updated %d available %d of %d", name, d.Generation, s.ObservedGeneration, s.UpdatedReplicas, s.AvailableReplicas, want)
	}
	pods, err := c.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return err
	}
	if n := len(pods.Items); n != int(want) {
		return fmt.Errorf("Deployment %s: %d pods, want %d", name, n, want)
	}
	return nil
}

// roll restarts the Deployment's pods, as `kubectl rollout restart` does.
func (c *cluster) roll(ctx context.Context, name string, n int) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubelettest/roll":"%d"}}}}}`, n)
	_, err := c.client.AppsV1().Deployments("default").Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// podExits follows a Deployment's pods by their runtime status, each pod's
// app and proxy container, until its context ends, and keeps each pod's app
// exit → proxy exit once both have finished: the runtime's times, read
// before the kubelet's garbage collection removes the containers.
type podExits struct {
	c          *cluster
	name       string
	app, proxy string // the containers' names
	mu         sync.Mutex
	ids        map[string][2]string     // pod: the app's and the proxy's container IDs
	gaps       map[string]time.Duration // pod: proxy exit less app exit
}

func (e *podExits) watch(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if pods, err := e.c.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + e.name}); err == nil {
			for i := range pods.Items {
				a, p := status(&pods.Items[i], e.app), status(&pods.Items[i], e.proxy)
				if a == nil || p == nil || a.ContainerID == "" || p.ContainerID == "" {
					continue
				}
				_, aid, _ := strings.Cut(a.ContainerID, "://")
				_, pid, _ := strings.Cut(p.ContainerID, "://")
				e.mu.Lock()
				if _, ok := e.ids[pods.Items[i].Name]; !ok {
					e.ids[pods.Items[i].Name] = [2]string{aid, pid}
				}
				e.mu.Unlock()
			}
		}
		e.mu.Lock()
		for pod, ids := range e.ids {
			if _, done := e.gaps[pod]; done {
				continue
			}
			a, aerr := theNode.criStatus(ids[0])
			p, perr := theNode.criStatus(ids[1])
			if aerr == nil && perr == nil && a.FinishedAt != 0 && p.FinishedAt != 0 {
				e.gaps[pod] = p.finished().Sub(a.finished())
			}
		}
		e.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// summary is the pods' app exit → proxy exit: the median and the range.
func (e *podExits) summary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	gaps := slices.Sorted(maps.Values(e.gaps))
	if len(gaps) == 0 {
		return "no pod's exits seen"
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("app exit → proxy exit median %s (%s to %s, %d pods)", r(gaps[len(gaps)/2]), r(gaps[0]), r(gaps[len(gaps)-1]), len(gaps))
}

// A Deployment of three replicas behind a Service, under a steady load
// from a mesh client that follows the Service's ready endpoints, rolled
// twice: every request is counted, and every connection the client's
// kept-alive half makes, those to a pod whose deletion had begun apart (a
// close hint's waste: see load.keepWasted). The app keeps serving for its
// preStop (the form's 5 s, or 8 s: longer than Istio's 5 s termination
// drain, with some requests that take 6 s in flight), then stops accepting
// and finishes what is in flight. This project's forms, classic and native, lose none,
// with or without a --drain-delay; the baselines' losses are reported
// beside them: pilot-agent's default drain, pilot-agent with
// EXIT_ON_ZERO_ACTIVE_CONNECTIONS, and Istio's own native sidecar.
//
// A failure is held to what the suite saw of its pod: a request sent to a
// pod whose deletion had been asked for longer ago than the app's preStop,
// which the client's slices still listed ready, met an app that had
// stopped by design, and is counted apart as the client's lag (a
// kube-proxy or a mesh lags too); every other failure fails the test.
func TestClusterRollout(t *testing.T) {
	t.Parallel()
	needCluster(t)
	noDelay, delay1s, delay3s := []string{"--drain-delay=0s"}, []string{"--drain-delay=1s"}, []string{"--drain-delay=3s"}
	// Two rows at a time per core, at most five (each is 3 to 6 pods
	// under a steady load): all of them at once on two cores starved the kubelet and the
	// API server (every form, ours too, then lost a fifth of its requests
	// to endpoints that never came ready), and five beside the rest of the
	// suite kept the 1-minute load near 100, past any real node.
	slots := make(chan struct{}, min(2*runtime.GOMAXPROCS(0), 5)) // GOMAXPROCS: the CPU quota's cores
	for _, tc := range []struct {
		name    string
		form    proxyForm
		startup time.Duration // before the app listens
		preStop time.Duration
		slow    bool          // every tenth request takes 6s
		flags   []string      // the supervisor's
		lag     time.Duration // the client's, behind the EndpointSlices
		// istio: Envoy's --drain-strategy immediate, as Istio runs it
		// (every connection told to close at its next response, where the
		// manifest's gradual 30 s tells a share growing over 30 s).
		istio bool
	}{
		{"roll-classic", classic, 0, 5 * time.Second, false, noDelay, 0, false},
		{"roll-classic-delay3s", classic, 0, 5 * time.Second, false, delay3s, 0, false},
		// As Istio runs a sidecar (Envoy's --drain-strategy immediate),
		// the client following the endpoints
		// 2 s late as a kube-proxy or a mesh does: for 2 s of its drain
		// the pod is among the client's ready endpoints, where a close
		// hint only sends the client back to it.
		{"roll-classic-istio-lag2s", classic, 0, 5 * time.Second, false, noDelay, 2 * time.Second, true},
		{"roll-classic-istio-lag2s-delay1s", classic, 0, 5 * time.Second, false, delay1s, 2 * time.Second, true},
		{"roll-classic-istio-lag2s-delay3s", classic, 0, 5 * time.Second, false, delay3s, 2 * time.Second, true},
		{"roll-native", native, 0, 5 * time.Second, false, noDelay, 0, false},
		{"roll-policy", policy, 0, 5 * time.Second, false, nil, 0, false},
		{"roll-classic-long", classic, 0, 8 * time.Second, true, noDelay, 0, false},
		{"roll-classic-long-delay3s", classic, 0, 8 * time.Second, true, delay3s, 0, false},
		{"roll-native-long", native, 0, 8 * time.Second, true, noDelay, 0, false},
		// The app listens 3 s after it starts: the form's readiness probe
		// on the app keeps it out of the endpoints until then (without
		// it, 204 of 1072 requests failed with 503).
		{"roll-classic-slow-start", classic, 3 * time.Second, 5 * time.Second, false, nil, 0, false},
		{"roll-pilot-agent", pilotAgentOnly, 0, 5 * time.Second, false, nil, 0, false},
		{"roll-pilot-agent-long", pilotAgentOnly, 0, 8 * time.Second, true, nil, 0, false},
		{"roll-pilot-agent-exit-on-zero", pilotAgentZero, 0, 5 * time.Second, false, nil, 0, false},
		{"roll-pilot-agent-exit-on-zero-long", pilotAgentZero, 0, 8 * time.Second, true, nil, 0, false},
		{"roll-istio-native", istioNative, 0, 5 * time.Second, false, nil, 0, false},
		{"roll-istio-native-long", istioNative, 0, 8 * time.Second, true, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			baseline := tc.form == pilotAgentOnly || tc.form == pilotAgentZero || tc.form == istioNative
			if baseline {
				needPilotAgent(t)
			}
			theReport.of(t)
			c := theNode.cluster
			ctx := context.Background()
			c.envoyConfig(t)
			if tc.form == policy {
				c.admissionPolicies(t)
			}
			d := deploymentFrom(t, tc.name, 3, tc.form, tc.startup, tc.preStop, tc.flags...)
			if tc.istio {
				istioEnvoy(t, d)
			}
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "default"},
				Spec: corev1.ServiceSpec{Selector: d.Spec.Selector.MatchLabels,
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8000)}}},
			}
			if _, err := c.client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				c.client.AppsV1().Deployments("default").Delete(ctx, tc.name, metav1.DeleteOptions{}) //nolint:errcheck
				c.client.CoreV1().Services("default").Delete(ctx, tc.name, metav1.DeleteOptions{})    //nolint:errcheck
			})
			if err := proctest.Poll(3*time.Minute, func() error { return c.rolledOut(ctx, tc.name) }); err != nil {
				t.Fatalf("not available after 3m: %v", err)
			}
			if tc.form == policy {
				c.wantDeploymentInjected(t, tc.name)
			}
			path := func(i int) string {
				if tc.slow && i%10 == 5 {
					return "/app?delay=6s"
				}
				return "/app?delay=20ms"
			}
			l := newLoad(c, tc.name, 8000, 25*time.Millisecond, path)
			l.lag = tc.lag
			wctx, stopWatch := context.WithCancel(ctx)
			defer stopWatch()
			go l.watch(wctx)
			go l.watchDeletions(wctx, "app="+tc.name)
			if err := proctest.Poll(time.Minute, func() error {
				if n := len(l.ready()); n != 3 {
					return fmt.Errorf("%d ready endpoints", n)
				}
				return nil
			}); err != nil {
				t.Fatalf("the Service's endpoints: %v", err)
			}
			lctx, stopLoad := context.WithCancel(ctx)
			defer stopLoad() // a Fatal below must not leave the load running
			loaded := make(chan struct{})
			go func() { l.run(lctx); close(loaded) }()
			// Under way: some requests answered before the first roll.
			if err := proctest.Poll(30*time.Second, func() error {
				if _, ok, _ := l.counts(); ok < 40 {
					return errNotYet
				}
				return nil
			}); err != nil {
				stopLoad()
				t.Fatalf("the load gets no answers: %v", l.failureLines())
			}
			proxy := "envoy"
			if baseline {
				proxy = "istio-proxy"
			}
			exits := &podExits{c: c, name: tc.name, app: "web", proxy: proxy, ids: map[string][2]string{}, gaps: map[string]time.Duration{}}
			ectx, stopExits := context.WithCancel(ctx)
			exitsDone := make(chan struct{})
			go func() { exits.watch(ectx); close(exitsDone) }()
			defer func() { stopExits(); <-exitsDone }()
			start := time.Now()
			for roll := 1; roll <= 2; roll++ {
				if err := c.roll(ctx, tc.name, roll); err != nil {
					t.Fatal(err)
				}
				if err := proctest.Poll(5*time.Minute, func() error { return c.rolledOut(ctx, tc.name) }); err != nil {
					stopLoad()
					t.Fatalf("roll %d not done after 5m: %v", roll, err)
				}
			}
			took := time.Since(start)
			theReport.phase(t, "rolled twice")
			if tc.form == policy {
				c.wantDeploymentInjected(t, tc.name)
			}
			stopLoad()
			<-loaded
			// The last pods' exits are read before the containers go.
			if err := proctest.Poll(time.Minute, func() error {
				exits.mu.Lock()
				defer exits.mu.Unlock()
				if n := len(exits.gaps); n < 6 {
					return fmt.Errorf("%d of the 6 old pods' exits seen", n)
				}
				return nil
			}); err != nil {
				t.Logf("exits: %v", err)
			}
			sent, ok, _ := l.counts()
			failed, kinds := l.failed()
			keep, dials := l.keepSent.Load(), l.keepDials.Load()
			wasted, wastedLast := l.wastedDials()
			// A request the client sent to a pod whose app had ended its
			// preStop is lost whatever the proxy does; it is counted
			// apart, with the evidence below.
			lagged := l.pastPreStop(tc.preStop)
			note(t, "%d requests, %d failed (%s; %d past the app's preStop), %d ok, two rolls of 3 pods in %s; kept-alive half: %d requests on %d new connections (%.3f per request), %d of them to a pod already deleting (the last %s after its deletion was seen); %s; %s",
				sent, failed, or(kinds), lagged, ok, took.Round(100*time.Millisecond), keep, dials, float64(dials)/float64(max(keep, 1)),
				wasted, wastedLast.Round(time.Millisecond), exits.summary(), l.dropLag())
			if failed > 0 {
				t.Logf("  the load started at %s; times below are since then", l.start.Format("15:04:05.000"))
			}
			for _, e := range l.failureLines() {
				t.Logf("  failed: %s", e)
			}
			for _, pod := range l.failedPods() {
				for _, e := range c.events(t, "Pod", pod) {
					t.Logf("  event: %s %s %s ×%d from %s to %s: %s", pod, e.Reason, e.InvolvedObject.FieldPath, e.Count,
						e.FirstTimestamp.Format(time.TimeOnly), e.LastTimestamp.Format(time.TimeOnly), e.Message)
				}
			}
			// A moment without a ready endpoint is explained before it
			// counts: what the slices listed then, the node's load, and
			// the probes that took the pods out.
			if moments := l.unready(); len(moments) > 0 {
				for _, m := range moments {
					t.Logf("  no ready endpoint %s", m)
				}
				for _, e := range c.probeFailures(t, tc.name) {
					t.Logf("  probe: %s", e)
				}
			}
			if lagged > 0 {
				t.Logf("  %d of the failures went to pods whose deletion was asked for more than the app's preStop (%s) before: the client's endpoints lagged", lagged, tc.preStop)
			}
			if !baseline && failed-lagged > 0 {
				t.Fatalf("%d of %d requests failed during the rollout (%d of them the client's lag)", failed, sent, lagged)
			}
		})
	}
}
