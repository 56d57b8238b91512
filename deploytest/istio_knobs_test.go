package deploytest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const istioTemplateMD = root + "/docs/istio-injection-template.md"

// The template's per-pod annotations: each good value reaches the
// supervisor's command line as its flag, each bad one fails the injection
// with one line that names the annotation, drain-timeout raises Envoy's
// drain time with the drain's bound, and the adoption page lists exactly
// the annotations the template reads.
func TestIstioKnobs(t *testing.T) { eachIstio(t, testIstioKnobs) }

func testIstioKnobs(t *testing.T, r istioRelease) {
	in := r.injector(t)
	// The health port is declared, by the name the other forms give it,
	// so that a PodMonitor finds /metrics (docs/reference.md, Scraping).
	for _, native := range []string{"false", "true"} {
		spec := mustInject(t, in, meshJob(t, map[string]string{"sidecar.istio.io/nativeSidecar": native}))
		proxy := find(append(spec.InitContainers, spec.Containers...), "istio-proxy")
		if proxy == nil || !slices.ContainsFunc(proxy.Ports, func(p corev1.ContainerPort) bool { return p.Name == "ps-health" && p.ContainerPort == 15022 }) {
			t.Errorf("native %s: istio-proxy does not declare 15022 as ps-health: %+v", native, proxy)
		}
	}
	for _, tt := range []struct {
		annotations map[string]string
		want        []string // flags on istio-proxy's command
	}{
		{map[string]string{"proxy-supervisor.io/drain-min": "10s"}, []string{"--drain-min=10s"}},
		{map[string]string{"proxy-supervisor.io/drain-timeout": "1m30s", "proxy-supervisor.io/drain-delay": "500ms"},
			[]string{"--drain-timeout=1m30s", "--drain-delay=500ms"}},
		{map[string]string{"proxy-supervisor.io/app-ports": "8080,9090"}, []string{"--app-ports=8080,9090"}},
		{map[string]string{"proxy-supervisor.io/log-format": "json", "proxy-supervisor.io/log-level": "debug"},
			[]string{"--log-format=json", "--log-level=debug"}},
	} {
		proxy := find(mustInject(t, in, meshJob(t, tt.annotations)).Containers, "istio-proxy")
		if proxy == nil {
			t.Fatalf("%v: no istio-proxy", tt.annotations)
		}
		for _, f := range tt.want {
			if !slices.Contains(proxy.Command, f) {
				t.Errorf("%v: the command %q lacks %s", tt.annotations, proxy.Command, f)
			}
		}
		if i := slices.Index(proxy.Command, "--"); i < 0 || slices.ContainsFunc(proxy.Command[i:], func(a string) bool { return strings.HasPrefix(a, "--drain") || strings.HasPrefix(a, "--log") }) {
			t.Errorf("%v: a flag after -- goes to pilot-agent: %q", tt.annotations, proxy.Command)
		}
	}
	for _, tt := range []struct{ key, value string }{
		{"proxy-supervisor.io/drain-min", "10"},
		{"proxy-supervisor.io/drain-timeout", "forever"},
		{"proxy-supervisor.io/drain-delay", "-1s"},
		{"proxy-supervisor.io/app-ports", "8080,http"},
		{"proxy-supervisor.io/app-ports", "70000"},
		{"proxy-supervisor.io/log-format", "yaml"},
		{"proxy-supervisor.io/log-level", "verbose"},
		{"proxy-supervisor.io/client-image", "client image"},
		{"proxy-supervisor.io/proxy-image", "proxy image"},
		{"proxy-supervisor.io/native-delivery", "volume"},
	} {
		_, err := in.inject(t, meshJob(t, map[string]string{tt.key: tt.value}))
		if err == nil || !strings.Contains(err.Error(), "annotation "+tt.key+": \""+tt.value+"\"") {
			t.Errorf("%s: %q injected with %v, want an error that names the annotation and its value", tt.key, tt.value, err)
		}
	}
	// Envoy's drain time covers 1.5 times the bound the annotation sets,
	// as it does the bound derived from the grace period, and never less
	// than Istio's own (45 s by default).
	for _, tt := range []struct{ timeout, want string }{{"100s", "150s"}, {"1m30s", "135s"}, {"2.5s", "45s"}, {"10s", "45s"}} {
		proxy := find(mustInject(t, in, meshJob(t, map[string]string{"proxy-supervisor.io/drain-timeout": tt.timeout})).Containers, "istio-proxy")
		if got := proxyConfig(t, proxy)["drainDuration"]; got != tt.want {
			t.Errorf("drain-timeout %s: drainDuration %v, want %s", tt.timeout, got, tt.want)
		}
	}
	raw, err := os.ReadFile(istioValues)
	if err != nil {
		t.Fatal(err)
	}
	// The template reads these (--peers' is held by TestIstioInjection).
	read := map[string]bool{}
	for _, k := range []string{"drain-min", "drain-timeout", "drain-delay", "app-ports", "log-format", "log-level", "peers", "client-image", "proxy-image", "native-delivery"} {
		if !strings.Contains(string(raw), `"`+k+`"`) && !strings.Contains(string(raw), "proxy-supervisor.io/"+k) {
			t.Errorf("the template does not read proxy-supervisor.io/%s", k)
		}
		read["proxy-supervisor.io/"+k] = true
	}
	page, err := os.ReadFile(istioTemplateMD)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(proxy-supervisor\\.io/[a-z-]+)`").FindAllStringSubmatch(string(page), -1) {
		listed[m[1]] = true
	}
	for k := range read {
		if !listed[k] {
			t.Errorf("the template reads %s; %s does not list it", k, istioTemplateMD)
		}
	}
	for k := range listed {
		if !read[k] {
			t.Errorf("%s lists %s; the template does not read it", istioTemplateMD, k)
		}
	}
}
