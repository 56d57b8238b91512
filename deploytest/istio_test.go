package deploytest

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	istioValues   = root + "/deploy/istio/values.yaml"
	istioJob      = root + "/deploy/istio/job.yaml"
	istioOverride = root + "/deploy/istio/job-override.yaml"
	ourTemplate   = "proxy-supervisor"
)

// meshJob is deploy/istio/job.yaml with its pod's annotations changed:
// a key with an empty value is removed.
func meshJob(t *testing.T, annotations map[string]string) []byte {
	t.Helper()
	var job batchv1.Job
	decodeFile(t, istioJob, &job)
	a := job.Spec.Template.Annotations
	for k, v := range annotations {
		if v == "" {
			delete(a, k)
		} else {
			a[k] = v
		}
	}
	out, err := yaml.Marshal(&job)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustInject(t *testing.T, in *injector, job []byte) *corev1.PodSpec {
	t.Helper()
	out, err := in.inject(t, job)
	if err != nil {
		t.Fatalf("inject: %v", err)
	}
	var j batchv1.Job
	if err := yaml.Unmarshal(out, &j); err != nil {
		t.Fatalf("injected Job: %v\n%s", err, out)
	}
	return &j.Spec.Template.Spec
}

// The binary's two deliveries: from the client image into the pod's
// emptyDir, Istio's proxyv2 unchanged (a classic sidecar's default), or in
// the proxy image (images/proxy.Dockerfile's proxyv2: a native sidecar, or
// client-image none).
const (
	rebuiltImage   = "registry.example.com/proxyv2:1.31.0-custom" // a pod's own proxy-image
	installedProxy = "/opt/proxy-supervisor/bin/proxy-supervisor"
	nativeDelivery = "proxy-supervisor.io/native-delivery"
)

// fromProxyImage are the annotations of a pod whose proxy image carries the
// binary.
func fromProxyImage(more map[string]string) map[string]string {
	a := map[string]string{"proxy-supervisor.io/client-image": "none", "proxy-supervisor.io/proxy-image": rebuiltImage}
	maps.Copy(a, more)
	return a
}

func TestIstioInjection(t *testing.T) { eachIstio(t, testIstioInjection) }

func testIstioInjection(t *testing.T, r istioRelease) {
	const hold = "proxy.istio.io/config"
	native := map[string]string{"sidecar.istio.io/nativeSidecar": "true"}
	for _, tt := range []struct {
		name        string
		set         []string
		annotations map[string]string
		native      bool
		hold        bool
		order       []string // containers
	}{
		{name: "classic", annotations: map[string]string{hold: ""}, order: []string{"job", "istio-proxy"}},
		{name: "classic hold", hold: true, order: []string{"istio-proxy", "job"}},
		{name: "native hold", native: true, hold: true, annotations: native, order: []string{"job"}},
		{name: "native", native: true, annotations: map[string]string{hold: "", "sidecar.istio.io/nativeSidecar": "true"}, order: []string{"job"}},
		{name: "cni", set: []string{"components.cni.enabled=true"}, hold: true, order: []string{"istio-proxy", "job"}},
		{name: "classic proxy image", hold: true, annotations: fromProxyImage(nil), order: []string{"istio-proxy", "job"}},
		{name: "native proxy image", native: true, hold: true, annotations: fromProxyImage(native), order: []string{"job"}},
		{name: "native install", native: true, hold: true, annotations: map[string]string{"sidecar.istio.io/nativeSidecar": "true", nativeDelivery: "install"}, order: []string{"job"}},
		{name: "classic none", hold: true, annotations: map[string]string{"proxy-supervisor.io/client-image": "none"}, order: []string{"istio-proxy", "job"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := r.injector(t, tt.set...)
			job := meshJob(t, tt.annotations)
			spec := mustInject(t, in, job)
			plain := mustInject(t, in, meshJobWith(t, job, "sidecar"))
			istio := find(plain.Containers, "istio-proxy")
			if tt.native {
				istio = find(plain.InitContainers, "istio-proxy")
			}
			fromClient := (!tt.native || tt.annotations[nativeDelivery] == "install") && tt.annotations["proxy-supervisor.io/client-image"] != "none"
			bin, image := installedProxy, istio.Image
			switch {
			case fromClient:
			case tt.annotations["proxy-supervisor.io/proxy-image"] != "":
				bin, image = proxyBinary, rebuiltImage
			default:
				// The release's proxy image at Istio's tag.
				bin, image = proxyBinary, theRelease(t).registry+"/proxyv2:"+istio.Image[strings.LastIndex(istio.Image, ":")+1:]+"-"+theRelease(t).version
			}
			if got := names(spec.Containers); !slices.Equal(got, tt.order) {
				t.Errorf("containers %q, want %q", got, tt.order)
			}
			proxy := find(spec.Containers, "istio-proxy")
			if tt.native {
				if proxy != nil {
					t.Fatalf("native mode: an istio-proxy in containers too: %+v", proxy)
				}
				proxy = find(spec.InitContainers, "istio-proxy")
				if proxy == nil || proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
					t.Fatalf("native mode: no istio-proxy init container with restartPolicy Always: %+v", proxy)
				}
			}
			if proxy == nil {
				t.Fatalf("no istio-proxy container")
			}
			if proxy.Image != image {
				t.Errorf("istio-proxy image %q, want %q", proxy.Image, image)
			}

			// Istio's args stay; our command ends with pilot-agent.
			want := []string{bin, "supervise", "--peers=job", "--restart-policy=Never", "--grace-period=30s", "--proxy-uid=1337",
				"--extra-ready-url=http://127.0.0.1:15020/healthz/ready"}
			if tt.native {
				want = append(want, "--native-sidecar")
			}
			if tt.native && !fromClient {
				// One container: it installs the binary itself.
				want = append(want, "--install=/opt/proxy-supervisor/bin")
			}
			want = append(want, "--", "/usr/local/bin/pilot-agent")
			if !slices.Equal(proxy.Command, want) {
				t.Errorf("istio-proxy command\n%q, want\n%q", proxy.Command, want)
			}
			if len(proxy.Args) < 2 || proxy.Args[0] != "proxy" || proxy.Args[1] != "sidecar" {
				t.Errorf("istio-proxy args %q, want Istio's (proxy sidecar ...)", proxy.Args)
			}
			checkCommandLine(t, "istio-proxy", append(slices.Clone(proxy.Command), proxy.Args...), nil)

			// Hooks: prestop always; wait only when the app is held by it.
			if l := proxy.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Exec == nil ||
				!slices.Equal(l.PreStop.Exec.Command, []string{bin, "prestop"}) || l.PreStop.HTTPGet != nil {
				t.Errorf("preStop %+v, want proxy-supervisor prestop alone", l)
			}
			var postStart []string
			if l := proxy.Lifecycle; l != nil && l.PostStart != nil && l.PostStart.Exec != nil {
				postStart = l.PostStart.Exec.Command
			}
			// A native sidecar's postStart holds the app, hold or not.
			held := tt.hold || tt.native
			if held != (len(postStart) > 0) || (held && (postStart[0] != bin || postStart[1] != "wait")) {
				t.Errorf("postStart %q with hold=%v, native=%v", postStart, tt.hold, tt.native)
			}

			// Probes point at the health port and keep Istio's timing.
			probes := map[string][2]*corev1.Probe{
				"readiness": {proxy.ReadinessProbe, istio.ReadinessProbe},
				"startup":   {proxy.StartupProbe, istio.StartupProbe},
			}
			if tt.native {
				// Istio's, polled once a second, would hold the app longer
				// than the postStart wait does.
				if proxy.StartupProbe != nil {
					t.Errorf("native mode: a startupProbe %+v, want Istio's removed", proxy.StartupProbe)
				}
				delete(probes, "startup")
			}
			for name, p := range probes {
				ours, theirs := p[0], p[1]
				if ours == nil || theirs == nil || ours.HTTPGet == nil {
					t.Errorf("%s probe: ours %+v, Istio's %+v", name, ours, theirs)
					continue
				}
				if ours.HTTPGet.Port.IntValue() != 15022 || ours.HTTPGet.Path != "/healthz/ready" {
					t.Errorf("%s probe on %v%s, want :15022/healthz/ready", name, ours.HTTPGet.Port.String(), ours.HTTPGet.Path)
				}
				if ours.PeriodSeconds != theirs.PeriodSeconds || ours.FailureThreshold != theirs.FailureThreshold || ours.TimeoutSeconds != theirs.TimeoutSeconds {
					t.Errorf("%s probe timing %d/%d/%d, want Istio's %d/%d/%d", name,
						ours.PeriodSeconds, ours.FailureThreshold, ours.TimeoutSeconds, theirs.PeriodSeconds, theirs.FailureThreshold, theirs.TimeoutSeconds)
				}
			}
			// Istio has no liveness probe; ours restarts a hung Envoy.
			if l := proxy.LivenessProbe; l == nil || l.HTTPGet == nil || l.HTTPGet.Port.IntValue() != 15022 || l.HTTPGet.Path != "/healthz/live" {
				t.Errorf("liveness probe %+v, want :15022/healthz/live", l)
			}
			// Everything else Istio injected is still there.
			if !slices.Equal(envNames(proxy.Env), envNames(istio.Env)) {
				t.Errorf("istio-proxy env %q, want Istio's %q", envNames(proxy.Env), envNames(istio.Env))
			}
			// PROXY_CONFIG is Istio's but for Envoy's drain time
			// (TestIstioDrainDuration).
			ours, theirs := proxyConfig(t, proxy), proxyConfig(t, istio)
			delete(ours, "drainDuration")
			if !reflect.DeepEqual(ours, theirs) {
				t.Errorf("PROXY_CONFIG %v, want Istio's %v", ours, theirs)
			}
			for _, v := range plain.Volumes {
				if findVolume(spec.Volumes, v.Name) == nil {
					t.Errorf("Istio's volume %s is gone", v.Name)
				}
			}

			// The control dir and the binary, shared with the app.
			control := findVolume(spec.Volumes, "proxy-supervisor")
			if control == nil || control.EmptyDir == nil || control.EmptyDir.Medium != corev1.StorageMediumMemory {
				t.Errorf("control volume %+v, want a tmpfs emptyDir", control)
			}
			install := find(spec.InitContainers, "proxy-supervisor-install")
			switch {
			case fromClient:
				if install == nil || install.Image != theRelease(t).image("client") || !slices.Equal(install.Command, []string{clientBinary, "install", "/opt/proxy-supervisor/bin"}) {
					t.Fatalf("install init container %+v, want the client image's %s install", install, clientBinary)
				}
				checkCommandLine(t, "proxy-supervisor-install", install.Command, nil)
				if m := mountOf(proxy, "proxy-supervisor-bin"); m == nil || !m.ReadOnly || !strings.HasPrefix(bin, m.MountPath+"/") {
					t.Errorf("istio-proxy mounts the binary's volume at %+v, want it read-only under %s", m, bin)
				}
				// Istio leaves a native istio-proxy ahead of the install
				// container, the order install-first.yaml's policy mends.
				if i, p := slices.Index(names(spec.InitContainers), install.Name), slices.Index(names(spec.InitContainers), "istio-proxy"); tt.native && (p < 0 || i < p) {
					t.Errorf("native install: init containers %q; the policy expects Istio's istio-proxy ahead of %s", names(spec.InitContainers), install.Name)
				}
			case tt.native && install != nil:
				t.Errorf("native mode: an install init container %+v; istio-proxy installs the binary itself", install)
			case tt.native:
				if m := mountOf(proxy, "proxy-supervisor-bin"); m == nil || m.ReadOnly || m.MountPath != "/opt/proxy-supervisor" {
					t.Errorf("native istio-proxy mounts the binary's volume at %+v, want it writable at /opt/proxy-supervisor", m)
				}
			case install == nil || install.Image != proxy.Image:
				t.Fatalf("install init container %+v, want one running the proxy image", install)
			default:
				checkCommandLine(t, "proxy-supervisor-install", install.Command, nil)
			}
			app := find(spec.Containers, "job")
			if m := mountOf(app, "proxy-supervisor"); m == nil || m.MountPath != "/var/run/proxy-supervisor" {
				t.Errorf("app mounts the control dir at %+v", m)
			}
			if m := mountOf(app, "proxy-supervisor-bin"); m == nil || !m.ReadOnly || !strings.HasPrefix(app.Command[0], m.MountPath+"/") {
				t.Errorf("app mounts the binary at %+v, want it read-only under %s", m, app.Command[0])
			}
			checkCommandLine(t, "job", app.Command, nil)

			// Re-injection changes nothing.
			out, _ := in.inject(t, job)
			again, err := in.inject(t, out)
			if err != nil || !bytes.Equal(again, out) {
				t.Errorf("re-injection is not idempotent (%v):\n%s\n---- became ----\n%s", err, out, again)
			}
		})
	}
}

// The kubelet's probes reach 15022 only when inbound capture skips it.
func TestIstioInjectionCapture(t *testing.T) { eachIstio(t, testIstioInjectionCapture) }

func testIstioInjectionCapture(t *testing.T, r istioRelease) {
	const exclude = "traffic.sidecar.istio.io/excludeInboundPorts"
	t.Run("iptables without exclusion fails", func(t *testing.T) {
		in := r.injector(t, "values.global.proxy.excludeInboundPorts=")
		_, err := in.inject(t, meshJob(t, nil))
		if err == nil || !strings.Contains(err.Error(), "15022") || !strings.Contains(err.Error(), exclude) {
			t.Fatalf("inject: %v, want an error that says how to exclude 15022", err)
		}
	})
	t.Run("iptables with the pod's exclusion", func(t *testing.T) {
		in := r.injector(t, "values.global.proxy.excludeInboundPorts=")
		spec := mustInject(t, in, meshJob(t, map[string]string{exclude: "9000, 15022"}))
		if init := find(spec.InitContainers, "istio-init"); init == nil || !slices.ContainsFunc(init.Args, func(a string) bool { return strings.Contains(a, "15022") }) {
			t.Errorf("istio-init %+v does not exclude 15022", init)
		}
	})
	t.Run("iptables with the mesh-wide exclusion", func(t *testing.T) {
		spec := mustInject(t, r.injector(t), meshJob(t, nil))
		if init := find(spec.InitContainers, "istio-init"); init == nil || !slices.ContainsFunc(init.Args, func(a string) bool { return strings.Contains(a, "15022") }) {
			t.Errorf("istio-init %+v does not exclude 15022", init)
		}
	})
	t.Run("cni writes the exclusion", func(t *testing.T) {
		in := r.injector(t, "components.cni.enabled=true", "values.global.proxy.excludeInboundPorts=")
		annotations := func(job []byte) map[string]string {
			out, err := in.inject(t, job)
			if err != nil {
				t.Fatal(err)
			}
			var j batchv1.Job
			if err := yaml.Unmarshal(out, &j); err != nil {
				t.Fatal(err)
			}
			return j.Spec.Template.Annotations
		}
		pod := meshJob(t, map[string]string{exclude: "9000"})
		got, istio := annotations(pod)[exclude], annotations(meshJobWith(t, pod, "sidecar"))[exclude]
		if got != istio+",15022" {
			t.Errorf("%s = %q, want Istio's %q and 15022", exclude, got, istio)
		}
		spec := mustInject(t, in, pod)
		if find(spec.InitContainers, "istio-init") != nil {
			t.Errorf("istio-init injected under CNI")
		}
	})
}

// Native mode comes from the pod's annotation or from istiod's
// ENABLE_NATIVE_SIDECARS. The template decides with the very expression
// Istio's own template uses, so it follows both as Istio's sidecar does;
// the tests inject with the variable unset (istioinject runs without the
// caller's environment).
func TestIstioNativeCondition(t *testing.T) { eachIstio(t, testIstioNativeCondition) }

func testIstioNativeCondition(t *testing.T, r istioRelease) {
	theirs := r.file(t, "charts/istio-control/istio-discovery/files/injection-template.yaml")
	ours, err := os.ReadFile(istioValues)
	if err != nil {
		t.Fatal(err)
	}
	cond := regexp.MustCompile(`:= (ne \(index \.ObjectMeta\.Annotations .sidecar\.istio\.io/nativeSidecar. [^\n]*) }}`)
	m := cond.FindSubmatch(theirs)
	if m == nil {
		t.Fatal("Istio's template no longer decides native mode as it did; compare ours")
	}
	if !bytes.Contains(ours, m[1]) {
		t.Errorf("%s does not decide native mode with Istio's expression %s", istioValues, m[1])
	}
}

// The template knows the pod's restart policy, grace period and app names.
func TestIstioInjectionPolicy(t *testing.T) { eachIstio(t, testIstioInjectionPolicy) }

func testIstioInjectionPolicy(t *testing.T, r istioRelease) {
	in := r.injector(t)
	var job batchv1.Job
	decodeFile(t, istioJob, &job)
	pod := &job.Spec.Template.Spec
	pod.RestartPolicy = corev1.RestartPolicyOnFailure
	grace := int64(45)
	pod.TerminationGracePeriodSeconds = &grace
	second := pod.Containers[0].DeepCopy()
	second.Name = "uploader"
	second.Command = []string{"/opt/proxy-supervisor/bin/proxy-supervisor", "exec", "--name=uploader", "--", "true"}
	// The app's own restart policy and rules (Kubernetes 1.35 and later),
	// which only the template can see: --peer-restart repeats them.
	never := corev1.ContainerRestartPolicyNever
	pod.Containers[0].RestartPolicy = &never
	pod.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{
		{Action: corev1.ContainerRestartRuleActionRestart, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}},
		{Action: corev1.ContainerRestartRuleActionRestartAllContainers, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0, 42}}},
	}
	pod.Containers = append(pod.Containers, *second)
	raw, err := yaml.Marshal(&job)
	if err != nil {
		t.Fatal(err)
	}
	spec := mustInject(t, in, raw)
	cmd := find(spec.Containers, "istio-proxy").Command
	for _, flag := range []string{"--peers=job,uploader", "--restart-policy=OnFailure", "--grace-period=45s",
		"--peer-restart=job=Never,Restart:In(42),RestartAllContainers:NotIn(0,42)"} {
		if !slices.Contains(cmd, flag) {
			t.Errorf("command %q lacks %s", cmd, flag)
		}
	}
}

// meshJobWith is job with only the given injection templates.
func meshJobWith(t *testing.T, job []byte, templates string) []byte {
	t.Helper()
	var j batchv1.Job
	if err := yaml.Unmarshal(job, &j); err != nil {
		t.Fatal(err)
	}
	j.Spec.Template.Annotations["inject.istio.io/templates"] = templates
	out, err := yaml.Marshal(&j)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// byName is the element of xs whose name is want, or nil.
func byName[T any](xs []T, name func(*T) string, want string) *T {
	for i := range xs {
		if name(&xs[i]) == want {
			return &xs[i]
		}
	}
	return nil
}

// namesOf lists the names of xs.
func namesOf[T any](xs []T, name func(*T) string) []string {
	var out []string
	for i := range xs {
		out = append(out, name(&xs[i]))
	}
	return out
}

func containerName(c *corev1.Container) string { return c.Name }

func names(cs []corev1.Container) []string { return namesOf(cs, containerName) }

func find(cs []corev1.Container, name string) *corev1.Container {
	return byName(cs, containerName, name)
}

func findVolume(vs []corev1.Volume, name string) *corev1.Volume {
	return byName(vs, func(v *corev1.Volume) string { return v.Name }, name)
}

func mountOf(c *corev1.Container, volume string) *corev1.VolumeMount {
	if c == nil {
		return nil
	}
	return byName(c.VolumeMounts, func(m *corev1.VolumeMount) string { return m.Name }, volume)
}

func envNames(env []corev1.EnvVar) []string {
	return namesOf(env, func(e *corev1.EnvVar) string { return e.Name })
}

// proxyConfig is a container's PROXY_CONFIG, pilot-agent's ProxyConfig.
func proxyConfig(t *testing.T, c *corev1.Container) map[string]any {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == "PROXY_CONFIG" {
			var m map[string]any
			if err := json.Unmarshal([]byte(e.Value), &m); err != nil {
				t.Fatalf("%s PROXY_CONFIG %q: %v", c.Name, e.Value, err)
			}
			return m
		}
	}
	t.Fatalf("%s has no PROXY_CONFIG", c.Name)
	return nil
}

// Envoy's drain time (ProxyConfig's drainDuration, which pilot-agent passes
// as --drain-time-s) keeps the app's long streams for the whole drain: at
// least 1.5 times the drain's bound, the grace period less 10 s, or Istio's
// own when longer (45 s by default). A shorter one in the pod's
// proxy.istio.io/config still decides at run time (pilot-agent applies the
// annotation over PROXY_CONFIG), and the supervisor warns about it.
func TestIstioDrainDuration(t *testing.T) { eachIstio(t, testIstioDrainDuration) }

func testIstioDrainDuration(t *testing.T, r istioRelease) {
	in := r.injector(t)
	for _, tt := range []struct {
		grace  int64
		config string
		want   string
	}{
		{30, "", "45s"},
		{120, "", "165s"},
		{120, `{"drainDuration": "200s"}`, "200s"},
		{120, `{"drainDuration": "20s"}`, "165s"},
	} {
		var j batchv1.Job
		if err := yaml.Unmarshal(meshJob(t, map[string]string{"proxy.istio.io/config": tt.config}), &j); err != nil {
			t.Fatal(err)
		}
		j.Spec.Template.Spec.TerminationGracePeriodSeconds = &tt.grace
		job, err := yaml.Marshal(&j)
		if err != nil {
			t.Fatal(err)
		}
		proxy := find(mustInject(t, in, job).Containers, "istio-proxy")
		if got := proxyConfig(t, proxy)["drainDuration"]; got != tt.want {
			t.Errorf("grace %ds, proxy.istio.io/config %q: drainDuration %v, want %s", tt.grace, tt.config, got, tt.want)
		}
	}
}

// deploy/istio/install-first.yaml, the policy that lets a native
// istio-proxy keep Istio's image: it acts on pod creation, is invoked
// again after Istio's webhook injects (reinvocation IfNeeded), fails
// closed, its binding names it, and it names the two init containers the
// template renders under native-delivery: install. The API server runs
// its CEL in kubelettest (TestClusterIstioInstallFirst).
func TestIstioInstallFirst(t *testing.T) { eachIstio(t, testIstioInstallFirst) }

func testIstioInstallFirst(t *testing.T, r istioRelease) {
	var (
		policy  *admissionv1.MutatingAdmissionPolicy
		binding *admissionv1.MutatingAdmissionPolicyBinding
	)
	for _, d := range deployDocs(t) {
		if d.file != "istio/install-first.yaml" {
			continue
		}
		switch o := d.obj.(type) {
		case *admissionv1.MutatingAdmissionPolicy:
			policy = o
		case *admissionv1.MutatingAdmissionPolicyBinding:
			binding = o
		default:
			t.Errorf("%s: a %s; want the policy and its binding alone", d.file, d.kind)
		}
	}
	if policy == nil || binding == nil {
		t.Fatal("deploy/istio/install-first.yaml lacks its policy or its binding")
	}
	if binding.Spec.PolicyName != policy.Name {
		t.Errorf("the binding names %q, the policy is %q", binding.Spec.PolicyName, policy.Name)
	}
	if r := policy.Spec.ReinvocationPolicy; r != admissionv1.IfNeededReinvocationPolicy {
		t.Errorf("reinvocationPolicy %q: the policy must run again after Istio's webhook has injected", r)
	}
	if f := policy.Spec.FailurePolicy; f == nil || *f != admissionv1.Fail {
		t.Errorf("failurePolicy %v, want Fail: a pod left in Istio's order never starts", f)
	}
	rules := policy.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"pods"}) || !slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) {
		t.Errorf("the policy matches %+v, want pods at their creation", rules)
	}
	var cel strings.Builder
	for _, c := range policy.Spec.MatchConditions {
		cel.WriteString(c.Expression)
	}
	for _, v := range policy.Spec.Variables {
		cel.WriteString(v.Expression)
	}
	in := r.injector(t)
	spec := mustInject(t, in, meshJob(t, map[string]string{"sidecar.istio.io/nativeSidecar": "true", nativeDelivery: "install"}))
	for _, name := range []string{"istio-proxy", "proxy-supervisor-install"} {
		if find(spec.InitContainers, name) == nil || !strings.Contains(cel.String(), "'"+name+"'") {
			t.Errorf("the template's init containers %q and the policy's conditions must both name %s", names(spec.InitContainers), name)
		}
	}
	// The default, the proxy image, has nothing for the policy to move.
	spec = mustInject(t, in, meshJob(t, map[string]string{"sidecar.istio.io/nativeSidecar": "true"}))
	if find(spec.InitContainers, "proxy-supervisor-install") != nil {
		t.Errorf("native-delivery image: an install container %q", names(spec.InitContainers))
	}
}
