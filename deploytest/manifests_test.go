package deploytest

import (
	"cmp"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Paths that images put the binary at.
const (
	clientBinary = "/proxy-supervisor"               // images/client.Dockerfile
	proxyBinary  = "/usr/local/bin/proxy-supervisor" // images/proxy.Dockerfile
	graceMargin  = 5 * time.Second                   // supervise's own margin
	defaultDir   = "/var/run/proxy-supervisor"       // --control-dir's default
)

// document is one object of a manifest file.
type document struct {
	file string
	kind string
	obj  any
}

// deployDocs decodes every YAML document under deploy/ strictly (unknown
// fields are errors) into its Kubernetes API type. deploy/istio/values.yaml
// is Helm values, not an object; the injection tests read it. A
// kustomization.yaml is Kustomize's (chart_test.go builds it).
func deployDocs(t *testing.T) []document {
	t.Helper()
	files, err := filepath.Glob(root + "/deploy/*/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under deploy/: %v", err)
	}
	var docs []document
	for _, f := range files {
		if f == filepath.Clean(istioValues) || f == istioValues || filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, part := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			if strings.TrimSpace(stripComments(part)) == "" {
				continue
			}
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(part), &meta); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			newObj, ok := deployTypes[meta.APIVersion+" "+meta.Kind]
			if !ok {
				t.Fatalf("%s #%d: unexpected %s %s", f, i, meta.APIVersion, meta.Kind)
			}
			obj := newObj()
			if err := yaml.UnmarshalStrict([]byte(part), obj); err != nil {
				t.Errorf("%s #%d (%s): %v", f, i, meta.Kind, err)
				continue
			}
			docs = append(docs, document{file: filepath.Base(filepath.Dir(f)) + "/" + filepath.Base(f), kind: meta.Kind, obj: obj})
		}
	}
	return docs
}

// deployTypes are the API types of the objects deploy/ may hold, by
// "apiVersion kind".
var deployTypes = map[string]func() any{
	"batch/v1 Job":       func() any { return &batchv1.Job{} },
	"batch/v1 CronJob":   func() any { return &batchv1.CronJob{} },
	"apps/v1 Deployment": func() any { return &appsv1.Deployment{} },
	"v1 Service":         func() any { return &corev1.Service{} },
	"v1 ConfigMap":       func() any { return &corev1.ConfigMap{} },
	"admissionregistration.k8s.io/v1 MutatingAdmissionPolicy":          func() any { return &admissionv1.MutatingAdmissionPolicy{} },
	"admissionregistration.k8s.io/v1 MutatingAdmissionPolicyBinding":   func() any { return &admissionv1.MutatingAdmissionPolicyBinding{} },
	"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy":        func() any { return &admissionv1.ValidatingAdmissionPolicy{} },
	"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding": func() any { return &admissionv1.ValidatingAdmissionPolicyBinding{} },
}

func stripComments(s string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(s, "")
}

// podOf is the pod template of a workload, or nil.
func podOf(d document) *corev1.PodTemplateSpec {
	switch o := d.obj.(type) {
	case *batchv1.Job:
		return &o.Spec.Template
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template
	case *appsv1.Deployment:
		return &o.Spec.Template
	}
	return nil
}

func TestManifestsDecodeStrictly(t *testing.T) {
	kinds := map[string]int{}
	for _, d := range deployDocs(t) {
		kinds[d.kind]++
	}
	// The forms the docs promise: Jobs (Never, OnFailure, native, Istio,
	// injected), a CronJob, a Deployment and its Service, Envoy's
	// configuration, and the admission policies and their bindings.
	for kind, n := range map[string]int{"Job": 5, "CronJob": 1, "Deployment": 1, "Service": 1, "ConfigMap": 1,
		"MutatingAdmissionPolicy": 1, "MutatingAdmissionPolicyBinding": 1, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1} {
		if kinds[kind] < n {
			t.Errorf("%d %s manifests, want at least %d", kinds[kind], kind, n)
		}
	}
	// A field that does not exist must fail, or the test proves nothing.
	if err := yaml.UnmarshalStrict([]byte("spec:\n  template:\n    spec:\n      restartPolicyy: Never\n"), &batchv1.Job{}); err == nil {
		t.Fatal("strict decoding accepted an unknown field")
	}
}

// TestManifests checks every standalone pod in deploy/ as a kubelet would
// run it, and every command line with the binary's own --check.
func TestManifests(t *testing.T) {
	docs := deployDocs(t)
	envoyAdmin := envoyAdminURL(t, docs)
	n := 0
	for _, d := range docs {
		tpl := podOf(d)
		if tpl == nil || strings.HasPrefix(d.file, "istio/") || strings.HasPrefix(d.file, "admission-policy/") {
			continue // checked after injection: Istio's here, the policy's by the API server (kubelettest)
		}
		n++
		t.Run(d.file, func(t *testing.T) {
			p := checkPod(t, &tpl.Spec)
			if p == nil {
				return
			}
			if u := p.flag("admin-url", "http://127.0.0.1:15000"); u != envoyAdmin {
				t.Errorf("--admin-url %s, Envoy's admin is at %s (envoy-config.yaml)", u, envoyAdmin)
			}
			checkAdminSocket(t, &tpl.Spec, p, envoyAdmin)
			checkSecurity(t, &tpl.Spec, p)
		})
	}
	if n < 5 {
		t.Errorf("checked %d standalone pods, want 5", n)
	}
}

// The injected pods get the same checks as the standalone ones.
func TestIstioPods(t *testing.T) { eachIstio(t, testIstioPods) }

func testIstioPods(t *testing.T, r istioRelease) {
	in := r.injector(t)
	for name, annotations := range map[string]map[string]string{
		"classic hold": nil,
		"native":       {"sidecar.istio.io/nativeSidecar": "true"},
	} {
		t.Run(name, func(t *testing.T) {
			checkPod(t, mustInject(t, in, meshJob(t, annotations)))
		})
	}
	// The pod that wires proxy-supervisor in itself, injected by an
	// istiod without our values: Istio's image, unchanged, and no mesh-wide
	// exclusion.
	t.Run("override", func(t *testing.T) {
		plain := r.injector(t, "values.global.proxy.image=proxyv2", "values.global.proxy.excludeInboundPorts=")
		raw, err := os.ReadFile(istioOverride)
		if err != nil {
			t.Fatal(err)
		}
		spec := mustInject(t, plain, raw)
		p := checkPod(t, spec)
		if p == nil {
			return
		}
		if want := find(mustInject(t, plain, meshJobWith(t, meshJob(t, nil), "sidecar")).Containers, "istio-proxy").Image; p.c.Image != want || len(p.c.Args) < 2 || p.c.Args[0] != "proxy" {
			t.Errorf("istio-proxy image %s args %q, want Istio's %s and Istio's args", p.c.Image, p.c.Args, want)
		}
		if init := find(spec.InitContainers, "istio-init"); init == nil || !slices.ContainsFunc(init.Args, func(a string) bool { return strings.Contains(a, "15022") }) {
			t.Errorf("istio-init does not exclude 15022")
		}
		if spec.Containers[0].Name != "istio-proxy" {
			t.Errorf("containers %q: istio-proxy is not first", names(spec.Containers))
		}
	})
}

// proxy is the container that runs `proxy-supervisor supervise`.
type proxy struct {
	c      *corev1.Container
	native bool
	flags  map[string]string
}

func (p *proxy) flag(name, def string) string {
	if v, ok := p.flags[name]; ok {
		return v
	}
	return def
}

func (p *proxy) duration(t *testing.T, name string, def time.Duration) time.Duration {
	v, ok := p.flags[name]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("--%s=%s: %v", name, v, err)
	}
	return d
}

// boolFlags are supervise's flags that take no value.
var boolFlags = []string{"native-sidecar", "strict-ready", "drain-inbound-only", "drain-healthcheck-fail", "fail-on-envoy-death", "check"}

// parseFlags reads --name=value and --name value up to "--".
func parseFlags(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		name, value, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case ok:
		case slices.Contains(boolFlags, name):
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		}
		out[name] = value
	}
	return out
}

// checkPod checks a pod that runs a proxy under proxy-supervisor and
// returns its proxy. It checks every proxy-supervisor command line with
// --check, and that ports, paths and volume mounts agree across containers.
func checkPod(t *testing.T, spec *corev1.PodSpec) *proxy {
	t.Helper()
	var p *proxy
	type container struct {
		c    *corev1.Container
		init bool
	}
	var all []container
	for i := range spec.InitContainers {
		all = append(all, container{&spec.InitContainers[i], true})
	}
	for i := range spec.Containers {
		all = append(all, container{&spec.Containers[i], false})
	}
	var installed []string  // binary paths that install commands create
	var installers []string // the containers that run install DIR
	peers := map[string]bool{}
	for _, ct := range all {
		c := ct.c
		env := literalEnv(c)
		argv := append(slices.Clone(c.Command), c.Args...)
		lines := map[string][]string{"command": argv}
		if l := c.Lifecycle; l != nil {
			if l.PostStart != nil && l.PostStart.Exec != nil {
				lines["postStart"] = l.PostStart.Exec.Command
			}
			if l.PreStop != nil && l.PreStop.Exec != nil {
				lines["preStop"] = l.PreStop.Exec.Command
			}
		}
		for where, line := range lines {
			if !isProxySupervisor(line) {
				continue
			}
			where = c.Name + " " + where
			checkCommandLine(t, where, line, env)
			checkBinaryPath(t, where, c, line[0], installed)
			flags := parseFlags(line[2:])
			if dir := flags["control-dir"]; line[1] != "install" && line[1] != "version" {
				checkControlDir(t, where, spec, c, cmp.Or(dir, defaultDir))
			}
			switch line[1] {
			case "install":
				installed = append(installed, installedPaths(t, spec, c, line[2])...)
				installers = append(installers, c.Name)
			case "exec", "complete":
				peers[cmp.Or(flags["name"], "default")] = true
			case "supervise":
				if p != nil {
					t.Fatalf("two supervisors: %s and %s", p.c.Name, c.Name)
				}
				native := ct.init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
				p = &proxy{c: c, native: native, flags: flags}
				// A native sidecar installs before its postStart wait lets
				// the app start.
				if dir := flags["install"]; dir != "" {
					if !native {
						t.Errorf("%s: --install in a classic sidecar: the app may start before the copy", where)
					}
					installed = append(installed, installedPaths(t, spec, c, dir)...)
				}
			}
		}
	}
	if p == nil {
		t.Error("no container runs proxy-supervisor supervise")
		return nil
	}
	// A native sidecar is one container: it starts before the app, so its
	// image's binary copies itself (supervise --install) before its
	// postStart wait lets the app start.
	if p.native && len(installers) > 0 {
		t.Errorf("native sidecar %s beside install containers %q: give it --install and an image with the binary instead", p.c.Name, installers)
	}
	checkProxy(t, spec, p, peers)
	return p
}

// checkProxy checks the supervisor's flags against the pod and its probes
// and hooks.
func checkProxy(t *testing.T, spec *corev1.PodSpec, p *proxy, peers map[string]bool) {
	t.Helper()
	// The restart policy, which the downward API cannot give.
	wantPolicy := cmp.Or(string(spec.RestartPolicy), string(corev1.RestartPolicyAlways))
	if got := p.flag("restart-policy", "Never"); got != wantPolicy {
		t.Errorf("restartPolicy %q with --restart-policy=%s, want %s", spec.RestartPolicy, got, wantPolicy)
	}
	// An app's own restart policy and rules, which the downward API
	// cannot give either (docs/reference.md, --peer-restart).
	given := strings.Split(p.flag("peer-restart", ""), ";")
	for _, c := range spec.Containers {
		if want := peerRestart(c); want != "" && !slices.Contains(given, want) {
			t.Errorf("container %s has its own restart policy: --peer-restart=%s lacks %s", c.Name, p.flag("peer-restart", ""), want)
		}
	}
	// The peers: the names the apps report with.
	if spec := p.flag("peers", "1"); len(peers) > 0 {
		var names []string
		for n := range peers {
			names = append(names, n)
		}
		slices.Sort(names)
		list := strings.Split(spec, ",")
		slices.Sort(list)
		if n, err := strconv.Atoi(spec); (err == nil && n != len(names)) || (err != nil && !slices.Equal(list, names)) {
			t.Errorf("--peers=%s, but the apps report as %q", spec, names)
		}
	}
	// The grace period holds the drain and the stop.
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if got := p.duration(t, "grace-period", 0); got != grace {
		t.Errorf("--grace-period=%v, the pod's is %v", got, grace)
	}
	// Without --drain-timeout, supervise derives the drain's bound from the
	// grace period.
	stop := p.duration(t, "stop-timeout", 5*time.Second)
	bound := p.duration(t, "drain-timeout", grace-stop-graceMargin)
	if need := bound + stop + graceMargin; need > grace {
		t.Errorf("drain-timeout + stop-timeout + %v = %v does not fit the grace period %v", graceMargin, need, grace)
	}
	checkEnvoyDrainTime(t, p.c, bound)
	// Native sidecars say so; classic ones start first and hold the app.
	if _, native := p.flags["native-sidecar"]; native != p.native {
		t.Errorf("--native-sidecar given: %v; the proxy is a native sidecar: %v", native, p.native)
	}
	health := hostPort(t, p.flag("health-addr", ":15022"))
	probes := map[string]*corev1.Probe{"readiness": p.c.ReadinessProbe, "startup": p.c.StartupProbe}
	if p.native {
		// A native sidecar's startupProbe holds the app, polled at most
		// once a second: its postStart wait holds it instead.
		if p.c.StartupProbe != nil {
			t.Errorf("%s: a native sidecar with a startupProbe: it holds the app up to its period after the proxy is ready", p.c.Name)
		}
		delete(probes, "startup")
	}
	// A Job's classic proxy may go without probes: its postStart wait holds
	// the app, nothing routes to it, and a probe between its exit and the
	// kubelet's noticing it records an Unhealthy event. A long-running
	// pod's proxy needs readiness to leave the endpoints when it drains.
	long := cmp.Or(spec.RestartPolicy, corev1.RestartPolicyAlways) == corev1.RestartPolicyAlways
	for name, probe := range probes {
		if probe == nil && (name != "readiness" || !long) {
			continue
		}
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", p.c.Name, name)
			continue
		}
		if port := containerPort(t, p.c, probe.HTTPGet.Port); port != health || probe.HTTPGet.Path != "/healthz/ready" {
			t.Errorf("%s probe on :%d%s, want :%d/healthz/ready (--health-addr)", name, port, probe.HTTPGet.Path, health)
		}
	}
	hook := func(h *corev1.LifecycleHandler) []string {
		if h == nil || h.Exec == nil {
			return nil
		}
		return h.Exec.Command
	}
	var postStart, preStop []string
	if p.c.Lifecycle != nil {
		postStart, preStop = hook(p.c.Lifecycle.PostStart), hook(p.c.Lifecycle.PreStop)
	}
	if !isProxySupervisor(preStop) || preStop[1] != "prestop" {
		t.Errorf("preStop %q, want proxy-supervisor prestop", preStop)
	}
	if !p.native && len(spec.Containers) > 1 && spec.Containers[0].Name != p.c.Name {
		t.Errorf("the proxy %s is not the first container: the app would start before it", p.c.Name)
	}
	if (p.native || len(spec.Containers) > 1) && (!isProxySupervisor(postStart) || postStart[1] != "wait") {
		t.Errorf("postStart %q, want proxy-supervisor wait to hold the app", postStart)
	}
	// tmpfs for the control dir (cheap fsync of the records).
	dir := cmp.Or(p.flags["control-dir"], defaultDir)
	if v := volumeAt(spec, p.c, dir); v == nil || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("control dir %s is not a tmpfs emptyDir: %+v", dir, v)
	}
}

// checkControlDir: a container that talks to the supervisor mounts the
// proxy's control volume at the control dir it names.
func checkControlDir(t *testing.T, where string, spec *corev1.PodSpec, c *corev1.Container, dir string) {
	t.Helper()
	m := mountAt(c, dir)
	if m == nil || m.MountPath != dir {
		t.Errorf("%s: nothing mounted at its control dir %s", where, dir)
		return
	}
	if m.ReadOnly {
		t.Errorf("%s: control dir %s is read-only; records and the socket need it writable", where, dir)
	}
	if v := findVolume(spec.Volumes, m.Name); v == nil || v.EmptyDir == nil {
		t.Errorf("%s: control dir %s is not an emptyDir", where, dir)
	}
}

// checkBinaryPath: the binary is in the image, or on a read-only mount of
// the volume an install container filled.
func checkBinaryPath(t *testing.T, where string, c *corev1.Container, bin string, installed []string) {
	t.Helper()
	m := mountAt(c, bin)
	switch {
	case m == nil && (bin == clientBinary || bin == proxyBinary):
	case m == nil:
		t.Errorf("%s: %s is neither on a mount nor where the images put it", where, bin)
	case !m.ReadOnly:
		t.Errorf("%s: %s is on a writable mount: another container could replace it", where, bin)
	case !slices.Contains(installed, m.Name+":"+strings.TrimPrefix(bin, m.MountPath)):
		t.Errorf("%s: no init container before it installs %s into volume %s (installed: %q)", where, bin, m.Name, installed)
	}
}

// installedPaths is what `install DIR` creates, as volume:path.
func installedPaths(t *testing.T, spec *corev1.PodSpec, c *corev1.Container, dir string) []string {
	t.Helper()
	m := mountAt(c, dir)
	if m == nil || m.ReadOnly {
		t.Errorf("%s: install %s: not on a writable mount", c.Name, dir)
		return nil
	}
	if v := findVolume(spec.Volumes, m.Name); v == nil || v.EmptyDir == nil {
		t.Errorf("%s: install %s: not an emptyDir", c.Name, dir)
	}
	return []string{m.Name + ":" + path.Join(strings.TrimPrefix(dir, m.MountPath), "proxy-supervisor")}
}

// checkSecurity: the proxy and the app under different uids, without
// privileges or a writable root filesystem.
func checkSecurity(t *testing.T, spec *corev1.PodSpec, p *proxy) {
	t.Helper()
	if sc := spec.SecurityContext; sc == nil || sc.FSGroup == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("pod securityContext %+v, want runAsNonRoot and fsGroup", sc)
	}
	uids := map[int64]string{}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.RunAsUser == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: securityContext %+v, want runAsUser, readOnlyRootFilesystem, no privilege escalation, capabilities dropped", c.Name, sc)
			continue
		}
		if other, ok := uids[*sc.RunAsUser]; ok && (other == p.c.Name || c.Name == p.c.Name) {
			t.Errorf("%s and %s share uid %d: the supervisor tells the proxy's sockets from the app's by uid", other, c.Name, *sc.RunAsUser)
		}
		uids[*sc.RunAsUser] = c.Name
	}
	if uid := p.c.SecurityContext.RunAsUser; uid != nil && p.flag("proxy-uid", "") != strconv.FormatInt(*uid, 10) {
		t.Errorf("--proxy-uid=%s, the proxy runs as %d", p.flag("proxy-uid", ""), *uid)
	}
	checkTrust(t, spec, p)
}

// checkTrust: every app container that runs a client of the control socket
// trusts the uid the supervisor runs as. A client trusts root, its own uid
// and 1337 (Istio's proxy), and the uids in PROXY_SUPERVISOR_SUPERVISOR_UID;
// a socket served by any other uid is refused, so a pod that misses this
// never gets past its first wait.
func checkTrust(t *testing.T, spec *corev1.PodSpec, p *proxy) {
	t.Helper()
	sup := p.c.SecurityContext.RunAsUser
	if sup == nil {
		return
	}
	for _, c := range spec.Containers {
		if c.Name == p.c.Name || !slices.ContainsFunc(c.Command, func(a string) bool { return strings.HasSuffix(a, "proxy-supervisor") }) {
			continue
		}
		trusted := []string{"0", "1337"}
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			trusted = append(trusted, strconv.FormatInt(*c.SecurityContext.RunAsUser, 10))
		}
		for _, kv := range literalEnv(&c) {
			if v, ok := strings.CutPrefix(kv, "PROXY_SUPERVISOR_SUPERVISOR_UID="); ok {
				trusted = append(trusted, strings.Split(v, ",")...)
			}
		}
		if !slices.Contains(trusted, strconv.FormatInt(*sup, 10)) {
			t.Errorf("%s trusts uids %v to serve the control socket, but the supervisor runs as %d: set PROXY_SUPERVISOR_SUPERVISOR_UID", c.Name, trusted, *sup)
		}
	}
}

// envoyAdminURL is the admin address of the shared Envoy configuration, as
// an --admin-url: unix:///PATH for a pipe, else http://127.0.0.1:PORT.
func envoyAdminURL(t *testing.T, docs []document) string {
	t.Helper()
	for _, d := range docs {
		cm, ok := d.obj.(*corev1.ConfigMap)
		if !ok || cm.Name != "envoy-sidecar" {
			continue
		}
		var cfg struct {
			Admin struct {
				Address struct {
					SocketAddress *struct {
						PortValue int `json:"port_value"`
					} `json:"socket_address"`
					Pipe *struct {
						Path string `json:"path"`
						Mode int    `json:"mode"`
					} `json:"pipe"`
				} `json:"address"`
			} `json:"admin"`
		}
		if err := yaml.Unmarshal([]byte(cm.Data["envoy.yaml"]), &cfg); err != nil {
			t.Fatalf("envoy.yaml: %v", err)
		}
		switch a := cfg.Admin.Address; {
		case a.Pipe != nil:
			if a.Pipe.Mode&0o077 != 0 {
				t.Errorf("envoy.yaml: admin pipe mode %o lets other uids connect", a.Pipe.Mode)
			}
			return "unix://" + a.Pipe.Path
		case a.SocketAddress != nil:
			return "http://127.0.0.1:" + strconv.Itoa(a.SocketAddress.PortValue)
		}
		t.Fatal("envoy.yaml: no admin address")
	}
	t.Fatal("no envoy-sidecar ConfigMap")
	return ""
}

// checkAdminSocket checks that an admin API on a unix socket is where the
// proxy container can create it (a writable volume) and no other container
// of the pod can reach it: that is what it is for.
func checkAdminSocket(t *testing.T, spec *corev1.PodSpec, p *proxy, adminURL string) {
	t.Helper()
	path, ok := strings.CutPrefix(adminURL, "unix://")
	if !ok {
		return
	}
	m := mountAt(p.c, path)
	if m == nil || m.ReadOnly {
		t.Errorf("%s: the admin socket %s is on no writable volume", p.c.Name, path)
		return
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Name == p.c.Name {
			continue
		}
		for _, o := range c.VolumeMounts {
			if o.Name == m.Name {
				t.Errorf("%s mounts %s, the volume of Envoy's admin socket", c.Name, m.Name)
			}
		}
	}
}

func literalEnv(c *corev1.Container) []string {
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

// mountAt is the container's mount that holds path.
func mountAt(c *corev1.Container, p string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	return best
}

func volumeAt(spec *corev1.PodSpec, c *corev1.Container, p string) *corev1.Volume {
	if m := mountAt(c, p); m != nil {
		return findVolume(spec.Volumes, m.Name)
	}
	return nil
}

func containerPort(t *testing.T, c *corev1.Container, port intstr.IntOrString) int {
	t.Helper()
	if port.Type == intstr.Int {
		return port.IntValue()
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort)
		}
	}
	t.Errorf("%s: no port named %s", c.Name, port.StrVal)
	return 0
}

func hostPort(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(port)
	if err != nil || err2 != nil {
		t.Fatalf("address %q: %v %v", addr, err, err2)
	}
	return n
}

// checkEnvoyDrainTime: an Envoy run by the supervisor is given a
// --drain-time-s of which 2/3 cover the drain's bound. From Envoy's release
// after 1.40 the connection manager closes a draining listener's idle
// connections and WebSocket or CONNECT streams in the last third of it,
// skip_exit or not, while the supervisor still waits for the app.
func checkEnvoyDrainTime(t *testing.T, c *corev1.Container, bound time.Duration) {
	t.Helper()
	line := append(slices.Clone(c.Command), c.Args...)
	i := slices.Index(line, "--")
	if i < 0 || i+1 >= len(line) || path.Base(line[i+1]) != "envoy" {
		return
	}
	child := line[i+2:]
	j := slices.Index(child, "--drain-time-s")
	if j < 0 || j+1 >= len(child) {
		t.Errorf("%s: envoy without --drain-time-s: its default (600 s) spreads a gradual drain's hints far past the drain's bound %v", c.Name, bound)
		return
	}
	n, err := strconv.Atoi(child[j+1])
	if err != nil {
		t.Fatalf("%s: --drain-time-s %q", c.Name, child[j+1])
	}
	if d := time.Duration(n) * time.Second; d*2/3 < bound {
		t.Errorf("%s: --drain-time-s %d: Envoy may close the app's long streams %v into the drain, before its bound %v", c.Name, n, d*2/3, bound)
	}
}

// peerRestart is the --peer-restart entry of a container with a restart
// policy of its own, "" for one without.
func peerRestart(c corev1.Container) string {
	if c.RestartPolicy == nil {
		return ""
	}
	e := c.Name + "=" + string(*c.RestartPolicy)
	for _, r := range c.RestartPolicyRules {
		if r.ExitCodes == nil {
			continue
		}
		var codes []string
		for _, v := range r.ExitCodes.Values {
			codes = append(codes, strconv.Itoa(int(v)))
		}
		e += fmt.Sprintf(",%s:%s(%s)", r.Action, r.ExitCodes.Operator, strings.Join(codes, ","))
	}
	return e
}
