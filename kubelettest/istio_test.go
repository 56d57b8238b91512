package kubelettest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// istioImage is Istio's proxyv2 as far as pilot-agent needs it without
// istiod: the supervisor, pilot-agent, the fake Envoy at Envoy's path,
// Istio's bootstrap template and a root certificate where pilot-agent reads
// them (relative to its working directory, /).
const istioImage = "docker.io/proxy-supervisor-test/proxyv2:dev"

// pilotAgent is the real pilot-agent and the bootstrap template beside it,
// or why there is none.
type pilotAgent struct {
	bin, template string
	missing       string
}

// buildPilotAgent builds pilot-agent with scripts/pilot-agent.sh, the build
// make bench uses, cached in the user's cache beside the kubelet. The
// build's progress is shown as it goes; go's last line says why it failed.
func buildPilotAgent() pilotAgent {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "pilot-agent.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(os.Stdout, &stderr)
	if err := cmd.Run(); err != nil {
		why := err.Error()
		for _, line := range strings.Split(stderr.String(), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "pilot-agent: ") {
				why = line
			}
		}
		return pilotAgent{missing: "pilot-agent did not build: " + why}
	}
	bin := strings.TrimSpace(stdout.String())
	return pilotAgent{bin: bin, template: filepath.Join(filepath.Dir(bin), "envoy_bootstrap_tmpl.json")}
}

// needPilotAgent skips a test that runs the real pilot-agent when it did
// not build, and fails it under CI=true, as the suite's own skip does.
func needPilotAgent(t *testing.T) {
	t.Helper()
	theReport.of(t) // a skip is in the table too
	if theAgent.missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("kubelettest: %s; CI=true, so this fails", theAgent.missing)
	}
	t.Skipf("kubelettest: SKIPPED, %s", theAgent.missing)
}

// istioFiles are the files of the Istio image, written into dir.
func istioFiles(dir string, bins func(string) string, agent pilotAgent) ([]imageFile, error) {
	cert, err := rootCert()
	if err != nil {
		return nil, err
	}
	certFile := filepath.Join(dir, "root-cert.pem")
	if err := os.WriteFile(certFile, cert, 0o644); err != nil {
		return nil, err
	}
	return []imageFile{
		{bins("proxy-supervisor"), "usr/local/bin/proxy-supervisor"},
		{agent.bin, "usr/local/bin/pilot-agent"},
		{bins("fake-envoy"), "usr/local/bin/envoy"},
		{agent.template, "var/lib/istio/envoy/envoy_bootstrap_tmpl.json"},
		{certFile, "var/run/secrets/istio/root-cert.pem"},
	}, nil
}

// rootCert is a self-signed CA certificate, the mesh's root as pilot-agent
// reads it: it only dials the (missing) istiod with it.
func rootCert() ([]byte, error) {
	_, _, der, err := newCA("kubelettest root")
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newCA is a self-signed CA certificate valid for a day, its key and its
// DER encoding.
func newCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, der, err
}

// istioProxy turns an Istio form's istio-proxy, whose command runs the
// supervisor over /usr/local/bin/pilot-agent, into the container Istio's
// injector would make of it, with what pilot-agent needs without istiod:
// the args (proxy sidecar), PROXY_CONFIG from the pod's annotation with
// binaryPath naming the fake Envoy (which gets its listener on :8000
// through FAKE_ENVOY_FLAGS, pilot-agent passing its environment on),
// Istio's uid and security context, the directories pilot-agent writes
// (emptyDirs, its root filesystem being read-only) and Istio's probe
// timings on the form's probes. The static pod has no ConfigMap and no
// token: the root certificate is in the image, and the CA requests to the
// missing istiod fail harmlessly.
func istioProxy(t *testing.T, pod *corev1.Pod, c *corev1.Container) {
	t.Helper()
	cfg := map[string]any{}
	if a := pod.Annotations["proxy.istio.io/config"]; a != "" {
		if err := json.Unmarshal([]byte(a), &cfg); err != nil {
			t.Fatalf("proxy.istio.io/config: %v", err)
		}
	}
	cfg["binaryPath"] = "/usr/local/bin/envoy"
	proxyConfig, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Istio's own proxyv2 where the pod runs the binary its install
	// container copied from the client image; else the proxy image, which
	// carries it (images/proxy.Dockerfile).
	c.Image = istioImage
	if len(c.Command) > 0 && strings.HasPrefix(c.Command[0], "/opt/proxy-supervisor/") {
		c.Image = istioBase
	}
	c.Args = []string{"proxy", "sidecar"}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "PROXY_CONFIG", Value: string(proxyConfig)},
		corev1.EnvVar{Name: "FAKE_ENVOY_FLAGS", Value: "--listener inbound=0.0.0.0:8000,inbound"})
	c.SecurityContext = &corev1.SecurityContext{
		RunAsUser:                ref[int64](1337),
		RunAsGroup:               ref[int64](1337),
		RunAsNonRoot:             ref(true),
		ReadOnlyRootFilesystem:   ref(true),
		AllowPrivilegeEscalation: ref(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	for _, v := range []struct{ name, path string }{
		{"istio-envoy", "/etc/istio/proxy"},
		{"istio-data", "/var/lib/istio/data"},
		{"workload-socket", "/var/run/secrets/workload-spiffe-uds"},
		{"credential-socket", "/var/run/secrets/credential-uds"},
		{"workload-certs", "/var/run/secrets/workload-spiffe-credentials"},
	} {
		empty := &corev1.EmptyDirVolumeSource{}
		if v.name == "istio-envoy" {
			empty.Medium = corev1.StorageMediumMemory
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{EmptyDir: empty}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.name, MountPath: v.path})
	}
	if p := c.StartupProbe; p != nil {
		p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold = 1, 3, 600
	}
	if p := c.ReadinessProbe; p != nil {
		p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold = 15, 3, 4
	}
}

func ref[T any](v T) *T { return &v }

// The real pilot-agent as the supervisor's child, in the Istio form that
// carries the proxy's command itself: the Job's app, under exec, gets its
// answer through Envoy (run by pilot-agent) and completes; the supervisor
// stops Envoy, pilot-agent exits with it, and every container exits 0.
// The binary's deliveries, as the template renders them: a classic
// sidecar on Istio's proxyv2 unchanged, running the binary the install
// container copied from the client image (its default); a classic one on
// the proxy image that carries it (client-image none); and a native one on
// the proxy image, which copies it for the app itself (Istio starts a
// native istio-proxy before any init container of a template).
func TestIstioPilotAgentJob(t *testing.T) {
	t.Parallel()
	needPilotAgent(t)
	for _, tt := range []struct {
		name string
		form func(*testing.T, *corev1.Pod)
	}{
		{"istio-job", func(*testing.T, *corev1.Pod) {}}, // job-override.yaml as it is
		{"istio-job-native", nativeOnProxyImage},
		{"istio-job-rebuilt", classicOnProxyImage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := theNode
			pod := fromDeploy(t, "istio/job-override.yaml", tt.name, "/podapp", "get", hello)
			tt.form(t, pod)
			native := slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "istio-proxy" })
			n.run(t, pod)
			p := n.waitPhase(t, tt.name, jobTimeout, corev1.PodSucceeded)
			want := map[string]exited{"proxy-supervisor-install": {0, 0}, "istio-proxy": {0, 0}, "job": {0, 0}}
			if native {
				delete(want, "proxy-supervisor-install")
			}
			wantExits(t, p, want)
			// The container's log: pilot-agent ran the fake Envoy, and the
			// completion stopped them (a native sidecar's end is the
			// kubelet's, once the app has exited: its exit 0 above).
			logs := n.logs(t, tt.name, "istio-proxy")
			wants := []string{"Envoy command: [-c etc/istio/proxy/envoy-rev.json"}
			if !native {
				wants = append(wants, `decided_by="every peer succeeded"`)
			}
			for _, want := range wants {
				if !strings.Contains(logs, want) {
					t.Fatalf("the proxy container's log lacks %q:\n%s", want, logs)
				}
			}
		})
	}
}

// classicOnProxyImage makes job-override.yaml's pod what the template
// renders under client-image none: istio-proxy on the proxy image, and the
// install container copying the binary from that image, as the proxy's uid.
func classicOnProxyImage(t *testing.T, p *corev1.Pod) {
	t.Helper()
	rebuilt(t, container(p, "istio-proxy"))
	install := container(p, "proxy-supervisor-install")
	if install == nil {
		t.Fatal("job-override.yaml: no proxy-supervisor-install")
	}
	install.Image = istioImage
	install.Command = []string{"/usr/local/bin/proxy-supervisor", "install", "/opt/proxy-supervisor/bin"}
	install.SecurityContext.RunAsUser = ref[int64](1337)
}

// nativeOnProxyImage makes job-override.yaml's pod what the template
// renders for a native sidecar: istio-proxy an init container on the proxy
// image that copies the binary for the app itself (--install), since Istio
// starts it before every other init container, and no install container;
// its postStart wait holds the app, and Istio's startupProbe is gone.
func nativeOnProxyImage(t *testing.T, p *corev1.Pod) {
	t.Helper()
	dropInstall(p)
	c := nativeIstio(t, p)
	rebuilt(t, c)
	supervisedNatively(c, "--install=/opt/proxy-supervisor/bin")
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "proxy-supervisor-bin", MountPath: "/opt/proxy-supervisor"})
}

// supervisedNatively gives job-override.yaml's istio-proxy what the
// template renders for a native sidecar: --native-sidecar and the flags
// given before pilot-agent, its postStart wait at a native sidecar's
// bound, and no startupProbe (the wait holds the app).
func supervisedNatively(c *corev1.Container, flags ...string) {
	i := slices.Index(c.Command, "--")
	c.Command = slices.Insert(c.Command, i, append([]string{"--native-sidecar"}, flags...)...)
	c.Lifecycle.PostStart.Exec.Command = []string{c.Command[0], "wait", "--timeout=600s"}
	c.StartupProbe = nil
}

// dropInstall removes job-override.yaml's install container: nothing runs
// before a native istio-proxy that Istio injects.
func dropInstall(p *corev1.Pod) {
	p.Spec.InitContainers = slices.DeleteFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "proxy-supervisor-install" })
}

// rebuilt makes job-override.yaml's istio-proxy the proxy image's form:
// the binary at /usr/local/bin in the image (images/proxy.Dockerfile), no
// mount of the client's copy.
func rebuilt(t *testing.T, c *corev1.Container) {
	t.Helper()
	const installed, inImage = "/opt/proxy-supervisor/bin/proxy-supervisor", "/usr/local/bin/proxy-supervisor"
	if c.Command[0] != installed {
		t.Fatalf("istio-proxy runs %s, want %s", c.Command[0], installed)
	}
	c.Command[0], c.Image = inImage, istioImage
	for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
		h.Exec.Command[0] = inImage
	}
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "proxy-supervisor-bin" })
}

// A pod deletion with the real pilot-agent as the child: the app's preStop
// keeps it serving for 8 s, then its SIGTERM closes its port; the drain
// holds the supervisor (and pilot-agent, and Envoy) until then, and the
// supervisor exits 0 inside the grace period. The app is a Deployment's,
// unwrapped, under restartPolicy Always.
func TestIstioPilotAgentDeletionDrains(t *testing.T) {
	t.Parallel()
	needPilotAgent(t)
	n := theNode
	pod := fromDeploy(t, "istio/job-override.yaml", "istio-drain", "/podapp", "serve", "127.0.0.1:8080")
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	proxy := container(pod, "istio-proxy")
	always := false
	for i, a := range proxy.Command {
		if strings.HasPrefix(a, "--restart-policy=") {
			proxy.Command[i], always = "--restart-policy=Always", true
		}
	}
	if !always {
		t.Fatalf("the proxy's command line has no --restart-policy=... to set to Always: %q", proxy.Command)
	}
	app := container(pod, "job")
	app.Command = app.Command[len(beforeDashes(app.Command)):]
	app.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/podapp", "sleep", "8s"}}}}
	n.run(t, pod)
	p := n.ready(t, "istio-drain")
	got, deleted := n.deleteAndWait(t, p, "istio-drain", 60*time.Second)
	wantCodes(t, got, map[string]int32{"istio-proxy": 0, "job": 0})
	app1, proxy1 := got["job"].finished().Sub(deleted), got["istio-proxy"].finished().Sub(deleted)
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	d := n.drainLog(t, "istio-drain", "istio-proxy")
	note(t, "after the deletion: the app exited at %s, the drain ended (%s) at %s, the supervisor exited at %s (grace %s)",
		app1.Round(time.Millisecond), d.end, d.ended().Sub(deleted).Round(time.Millisecond), proxy1.Round(time.Millisecond), grace)
	if app1 < 8*time.Second || proxy1 < app1 {
		t.Fatalf("the supervisor exited at %s, before the app closed its port (%s, after its 8s preStop)", proxy1, app1)
	}
	// Its exit code (0, not the SIGKILL's 137) says it exited inside the
	// grace period; its log, that the drain ended on the port's close.
	// How soon after is the kubelet's pace, which a busy node stretches.
	if d.end != "drained" {
		t.Fatalf("the drain ended %q after %s, want drained: the app closed its port at %s", d.end, d.after, app1)
	}
}
