package deploytest

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// workloadsValues is a values file of the chart's render-time path: a Job,
// a CronJob, a Deployment and a Pod, their settings from annotations and
// defaults.
const workloadsValues = "testdata/workloads.yaml"

// The render-time path decodes strictly against each release's API types
// (it is what a 1.34 or 1.35 cluster without the v1beta1 admission API
// applies), with no mutating policy in it, and each workload's pod
// template gets the sidecar as the policy would inject it: first among
// the init containers, a native sidecar, its flags from the pod's own
// annotations, restart policy, grace period and restart rules, the volumes
// after the pod's own, every app container's mounts and the supervisor's
// uid. kubelettest holds the render and the policy's injection to the same
// pod, in a real API server.
func TestChartWorkloads(t *testing.T) {
	t.Parallel()
	for minor := range minors {
		t.Run(minor, func(t *testing.T) {
			t.Parallel()
			if err := decodeAs(t, minor, renderChart(t, minor+".0", "-f", workloadsValues)); err != nil {
				t.Errorf("the render-time path for Kubernetes %s does not decode against its API: %v", minor, err)
			}
		})
	}
	pods := map[string]corev1.PodSpec{}
	for _, doc := range documents(renderChart(t, newestMinor+".0", "-f", workloadsValues)) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(o.Kind, "Mutating") {
			t.Errorf("with mutatingPolicy false the chart renders %s %s", o.Kind, o.Metadata.Name)
		}
		switch o.Kind {
		case "Job":
			pods[o.Kind] = decodeDoc[batchv1.Job](t, doc).Spec.Template.Spec
		case "CronJob":
			pods[o.Kind] = decodeDoc[batchv1.CronJob](t, doc).Spec.JobTemplate.Spec.Template.Spec
		case "Deployment":
			pods[o.Kind] = decodeDoc[appsv1.Deployment](t, doc).Spec.Template.Spec
		case "Pod":
			pods[o.Kind] = decodeDoc[corev1.Pod](t, doc).Spec
		}
	}
	for kind, want := range map[string]struct {
		flags      []string // in the sidecar's command
		uid        string
		memLimit   string
		initBefore int // the pod's own init containers, after the sidecar
		volumes    int
	}{
		"Job":        {[]string{"--peers=job", "--restart-policy=Never", "--grace-period=0s", "--proxy-uid=101", "--drain-min=2s", "--peer-restart=job=Never,Restart:In(42,43)"}, "101", "", 0, 4},
		"CronJob":    {[]string{"--peers=a,b", "--restart-policy=OnFailure", "--grace-period=30s"}, "101", "", 0, 4},
		"Deployment": {[]string{"--peers=web", "--restart-policy=Always", "--proxy-uid=1337", "--app-ports=8080"}, "1337", "128Mi", 1, 5},
		"Pod":        {[]string{"--peers=1", "--restart-policy=Always"}, "101", "", 0, 4},
	} {
		p, ok := pods[kind]
		if !ok {
			t.Errorf("the render holds no %s", kind)
			continue
		}
		if len(p.InitContainers) != 1+want.initBefore || p.InitContainers[0].Name != "proxy-supervisor" {
			t.Errorf("%s: init containers %d, the first %q; want the sidecar first, then the pod's own %d", kind, len(p.InitContainers), p.InitContainers[0].Name, want.initBefore)
			continue
		}
		s := p.InitContainers[0]
		if s.RestartPolicy == nil || *s.RestartPolicy != corev1.ContainerRestartPolicyAlways || !slices.Contains(s.Command, "--native-sidecar") {
			t.Errorf("%s: the sidecar is not a native one: %v %q", kind, s.RestartPolicy, s.Command)
		}
		for _, f := range want.flags {
			if !slices.Contains(s.Command, f) {
				t.Errorf("%s: the sidecar's command %q lacks %s", kind, s.Command, f)
			}
		}
		if got := s.Resources.Limits.Memory().String(); want.memLimit != "" && got != want.memLimit || want.memLimit == "" && len(s.Resources.Limits) > 0 {
			t.Errorf("%s: the sidecar's limits %v, want memory %q", kind, s.Resources.Limits, want.memLimit)
		}
		if len(p.Volumes) != want.volumes || p.Volumes[len(p.Volumes)-1].ConfigMap == nil {
			t.Errorf("%s: %d volumes, want %d, the last the bootstrap's ConfigMap", kind, len(p.Volumes), want.volumes)
		}
		for _, c := range p.Containers {
			uid := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "PROXY_SUPERVISOR_SUPERVISOR_UID" })
			mounts := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "proxy-supervisor-control" && m.MountPath == "/var/run/proxy-supervisor"
			})
			if uid < 0 || c.Env[uid].Value != want.uid || !mounts {
				t.Errorf("%s: container %s has env %v and mounts %v, want the supervisor's uid %s and the control volume", kind, c.Name, c.Env, c.VolumeMounts, want.uid)
			}
		}
	}
}

// A workload the render-time path cannot serve fails the render, naming
// the workload and what is wrong, never a half-made sidecar.
func TestChartWorkloadsRefused(t *testing.T) {
	t.Parallel()
	const job = `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"bad"},"spec":{"template":{"metadata":{"annotations":%s},"spec":{"restartPolicy":"Never","containers":[{"name":"job","image":"busybox"}]}}}}`
	for _, tc := range []struct{ workload, want string }{
		{strings.Replace(job, "%s", `{}`, 1), "workloads[0] (Job bad): its pod template lacks the annotation proxy-supervisor.io/envoy-config"},
		{strings.Replace(job, "%s", `{"proxy-supervisor.io/envoy-config":"e","proxy-supervisor.io/proxy-uid":"0"}`, 1), `proxy-supervisor.io/proxy-uid="0": want a uid`},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"bad"},"spec":{}}`, "workloads[0] (Deployment bad): it has no spec.template"},
		{`{"apiVersion":"v1","kind":"Service","metadata":{"name":"bad"},"spec":{}}`, "at '/workloads/0/kind': value must be one of"},
	} {
		_, err := tool("helm", "template", "proxy-supervisor", chartDir, "--kube-version", newestMinor+".0", "--set-json", "workloads=["+tc.workload+"]")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("workloads=[%s]: %v, want the render refused with %q", tc.workload, err, tc.want)
		}
	}
}

// decodeDoc decodes one YAML document strictly into T.
func decodeDoc[T any](t *testing.T, doc string) T {
	t.Helper()
	var v T
	if err := yaml.UnmarshalStrict([]byte(doc), &v); err != nil {
		t.Fatalf("%v:\n%s", err, doc)
	}
	return v
}
