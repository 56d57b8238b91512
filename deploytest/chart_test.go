package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
)

// The chart, the files rendered from it, and the Kubernetes releases its
// renders are decoded against (kubeapi/: go.mod is the newest, each
// go.1.NN.mod another).
const (
	chartDir     = root + "/charts/proxy-supervisor"
	policyDir    = root + "/deploy/admission-policy"
	releaseEnv   = root + "/images/release.env"
	versionFile  = root + "/VERSION"
	newestMinor  = "1.37"
	manifestsKit = root + "/scripts/manifests.sh"
)

var minors = map[string]string{"1.34": "go.1.34.mod", "1.35": "go.1.35.mod", "1.36": "go.1.36.mod", newestMinor: "go.mod"}

// tool runs one of deploytest's go.mod tools (helm, kustomize) by the path
// the go command built it at (go tool -n: built once, then cached), and
// returns its standard output; its standard error is in the error.
func tool(name string, args ...string) (string, error) {
	path, err := toolPath(name)
	if err != nil {
		return "", err
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+os.TempDir()+"/helm-cache", "HELM_CONFIG_HOME="+os.TempDir()+"/helm-config", "HELM_DATA_HOME="+os.TempDir()+"/helm-data")
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

var toolPaths sync.Map // name → func() (string, error)

func toolPath(name string) (string, error) {
	f, _ := toolPaths.LoadOrStore(name, sync.OnceValues(func() (string, error) {
		out, err := exec.Command("go", "tool", "-n", name).Output()
		if err != nil {
			return "", fmt.Errorf("go tool -n %s: %w", name, err)
		}
		return strings.TrimSpace(string(out)), nil
	}))
	return f.(func() (string, error))()
}

// kubeapi builds deploytest/kubeapi against one release's API types and
// returns the binary's path, once per release.
func kubeapi(t *testing.T, minor string) string {
	t.Helper()
	return program(t, "kubeapi", minors[minor])
}

// decodeAs decodes a render strictly against one release's API types; its
// error names each document that does not decode.
func decodeAs(t *testing.T, minor, render string) error {
	t.Helper()
	cmd := exec.Command(kubeapi(t, minor))
	cmd.Stdin = strings.NewReader(render)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// renderChart is `helm template` of the chart for a Kubernetes release, with
// extra flags (--set ...).
func renderChart(t *testing.T, kubeVersion string, flags ...string) string {
	t.Helper()
	out, err := tool("helm", append([]string{"template", "proxy-supervisor", chartDir, "--kube-version", kubeVersion}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// everyValue sets every value away from its default.
var everyValue = []string{
	"--set", "image.registry=registry.example.com:5000/mirror,image.repository=ps/envoy,image.digest=sha256:" + strings.Repeat("ab", 32),
	"--set", "namespaceSelector.matchLabels.mesh=on",
	"--set", "defaults.proxyUID=1337,defaults.proxyCPU=250m,defaults.proxyMemory=96Mi,defaults.proxyMemoryLimit=256Mi",
	"--set", "defaults.peers=app\\,worker,defaults.drainMin=2s,defaults.drainTimeout=40s,defaults.appPorts=8080\\,9090",
}

// helm lint --strict passes with the defaults and with every value set,
// and the values' schema refuses what would break a CEL string literal.
func TestChartLint(t *testing.T) {
	t.Parallel()
	for _, flags := range [][]string{nil, everyValue} {
		if out, err := tool("helm", append([]string{"lint", "--strict", chartDir}, flags...)...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
	for _, bad := range [][2]string{
		{"--set", "defaults.proxyCPU=1' || true || '"},
		{"--set", "image.registry=evil registry"},
		{"--set", "image.repository=envoy'"},
		{"--set", "image.tag=0.1.0' + '"},
		{"--set-string", "defaults.peers=app' + 'x"},
		{"--set", "defaults.drainTimeout=forever"},
		{"--set-string", "defaults.drainTimeout=0s"}, // supervise refuses a bound of 0
		{"--set-string", "defaults.appPorts=8080\\,70000"},
		{"--set", "defaults.proxyUID=0"},
		{"--set", "defaults.proxyCPU=null"}, // deleted: no CPU request at all
		{"--set", "image.digest=latest"},
		{"--set", "admissionAPIVersion=v2"},
		{"--set", "unknownValue=1"},
	} {
		if _, err := tool("helm", "template", "x", chartDir, bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s %s: rendered (%v), want the values' schema to refuse it", bad[0], bad[1], err)
		}
	}
}

// Every render, with the defaults and with every value set, decodes
// strictly against the API types of each release from 1.34 to 1.37, with
// the MutatingAdmissionPolicy's v1 from 1.36 and v1beta1 before; and a v1
// render does not decode against 1.35's, or the check proves nothing.
func TestChartRendersForEachRelease(t *testing.T) {
	t.Parallel()
	for minor := range minors {
		t.Run(minor, func(t *testing.T) {
			t.Parallel()
			want := "admissionregistration.k8s.io/v1"
			if minor < "1.36" {
				want = "admissionregistration.k8s.io/v1beta1"
			}
			for _, flags := range [][]string{nil, everyValue} {
				out := renderChart(t, minor+".0", flags...)
				for _, o := range objects(t, out) {
					if strings.HasPrefix(o.Kind, "Mutating") && o.APIVersion != want {
						t.Errorf("%s on %s: %s, want %s", o.Kind, minor, o.APIVersion, want)
					}
				}
				if err := decodeAs(t, minor, out); err != nil {
					t.Errorf("the chart for Kubernetes %s (%q) does not decode against its API: %v", minor, flags, err)
				}
			}
		})
	}
	if err := decodeAs(t, "1.35", renderChart(t, "1.36.0")); err == nil || !strings.Contains(err.Error(), "not in this release's API") {
		t.Errorf("a render for 1.36 decoded against 1.35's API (%v), want MutatingAdmissionPolicy v1 refused", err)
	}
}

// The values reach the objects: the image (by digest), the namespaces,
// each annotation's default in the CEL, and the switches.
func TestChartValues(t *testing.T) {
	t.Parallel()
	out := renderChart(t, newestMinor+".0", everyValue...)
	for _, want := range []string{
		": 'registry.example.com:5000/mirror/ps/envoy@sha256:" + strings.Repeat("ab", 32) + "'",
		"['proxy-supervisor.io/proxy-uid']) : 1337\n",
		"['proxy-supervisor.io/proxy-cpu'] : '250m'\n",
		"['proxy-supervisor.io/proxy-memory'] : '96Mi'\n",
		": {'memory': '256Mi'}\n",
		"['proxy-supervisor.io/peers'] : 'app,worker'\n",
		"'--drain-min=', '2s'", "'--drain-timeout=', '40s'", "'--app-ports=', '8080,9090'",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the render with every value set lacks %q", want)
		}
	}
	bound := 0
	for _, o := range objects(t, out) {
		if !strings.HasSuffix(o.Kind, "Binding") {
			continue
		}
		sel := o.Spec.MatchResources.NamespaceSelector
		guard := strings.HasSuffix(o.Metadata.Name, "-peer-restart")
		switch {
		case guard && sel != nil:
			t.Errorf("%s %s is narrowed to %v: the --peer-restart guard sees every pod", o.Kind, o.Metadata.Name, sel)
		case !guard && (sel == nil || sel.MatchLabels["mesh"] != "on"):
			t.Errorf("%s %s's namespaceSelector %v, want the values' mesh=on", o.Kind, o.Metadata.Name, sel)
		case !guard:
			bound++
		}
	}
	if bound != 2 {
		t.Errorf("%d injection bindings narrowed, want the mutating and the validating one", bound)
	}
	// A drain bound given by default makes the grace period's check moot.
	if strings.Contains(out, "leaves the proxy less than 1s to drain") {
		t.Error("with defaults.drainTimeout set, the policy still refuses a short grace period")
	}
	if !strings.Contains(renderChart(t, newestMinor+".0"), "leaves the proxy less than 1s to drain") {
		t.Error("the default render does not refuse a grace period too short to drain")
	}
	kinds := func(flags ...string) []string {
		var k []string
		for _, o := range objects(t, renderChart(t, newestMinor+".0", flags...)) {
			k = append(k, o.Kind+" "+o.Metadata.Name)
		}
		slices.Sort(k)
		return k
	}
	if got, want := kinds("--set", "validation=false,peerRestartGuard=false"),
		[]string{"MutatingAdmissionPolicy proxy-supervisor-inject", "MutatingAdmissionPolicyBinding proxy-supervisor-inject"}; !slices.Equal(got, want) {
		t.Errorf("with both validations off the chart renders %q, want %q", got, want)
	}
	if got := kinds(); len(got) != 6 {
		t.Errorf("the default render holds %q, want three policies and their bindings", got)
	}
}

// The chart's version and appVersion are VERSION's, and its image registry
// is images/release.env's REGISTRY: one place names each.
func TestChartNamesTheRelease(t *testing.T) {
	t.Parallel()
	version, err := os.ReadFile(versionFile)
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ Version, AppVersion string }
	decodeFileLoose(t, chartDir+"/Chart.yaml", &chart)
	if v := strings.TrimSpace(string(version)); chart.Version != v || chart.AppVersion != v {
		t.Errorf("Chart.yaml's version %q and appVersion %q, want VERSION's %q", chart.Version, chart.AppVersion, v)
	}
	r := theRelease(t)
	var values struct {
		Image struct{ Registry string }
	}
	decodeFileLoose(t, chartDir+"/values.yaml", &values)
	if values.Image.Registry != r.registry {
		t.Errorf("values.yaml's image.registry %q, want %s's REGISTRY %q", values.Image.Registry, releaseEnv, r.registry)
	}
}

// deploy/admission-policy/ is the chart rendered with its defaults, as
// make manifests writes it, and its Kustomize base builds the same objects.
func TestManifestsAreTheChart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if out, err := exec.Command("bash", manifestsKit, dir).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", manifestsKit, err, out)
	}
	files, _ := filepath.Glob(dir + "/*.yaml")
	if len(files) != 2 {
		t.Fatalf("make manifests wrote %q, want the two policy files", files)
	}
	var rendered string
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(policyDir + "/" + filepath.Base(f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/%s is not the chart's render: run make manifests", policyDir, filepath.Base(f))
		}
		rendered += string(want) + "\n---\n"
	}
	built, err := tool("kustomize", "build", policyDir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := canonical(t, built), canonical(t, rendered); !slices.Equal(got, want) {
		t.Errorf("kustomize build %s gives %d objects, not the chart's %d as rendered", policyDir, len(got), len(want))
	}
}

// object is what these tests read of a rendered object.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		MatchResources struct {
			NamespaceSelector *struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"namespaceSelector"`
		} `json:"matchResources"`
	} `json:"spec"`
}

// documents are a multi-document YAML stream's documents that hold more
// than comments.
func documents(stream string) []string {
	var docs []string
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

// decodeDocs decodes each document of a stream into a T.
func decodeDocs[T any](t *testing.T, stream string) []T {
	t.Helper()
	var out []T
	for _, d := range documents(stream) {
		var v T
		if err := yaml.Unmarshal([]byte(d), &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func objects(t *testing.T, stream string) []object { return decodeDocs[object](t, stream) }

// canonical is each object of a stream as JSON with sorted keys, sorted:
// the same objects give the same list, whatever their order or layout.
func canonical(t *testing.T, stream string) []string {
	t.Helper()
	var out []string
	for _, v := range decodeDocs[any](t, stream) {
		j, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(j))
	}
	slices.Sort(out)
	return out
}
