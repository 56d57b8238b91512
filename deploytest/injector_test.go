package deploytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
)

// istioRelease is istiod's injector at one Istio release: deploytest/istioinject
// built with the modfile that names the release (go.mod the newest, each
// go.1.NN.mod an older one).
type istioRelease struct {
	release string // "1.31", from the modfile's istio.io/api
	minor   int    // 31
	modfile string
}

var apiRelease = regexp.MustCompile(`(?m)^\s*istio\.io/api v1\.(\d+)\.`)

// istios lists the releases of istioinject's modfiles, newest first.
var istios = sync.OnceValues(func() ([]istioRelease, error) {
	files, err := filepath.Glob("istioinject/go*.mod")
	if err != nil {
		return nil, err
	}
	var out []istioRelease
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		m := apiRelease.FindSubmatch(raw)
		if m == nil {
			return nil, fmt.Errorf("%s requires no istio.io/api v1.N", f)
		}
		minor, _ := strconv.Atoi(string(m[1]))
		// The release names the builds and the rendered configs.
		if i := slices.IndexFunc(out, func(r istioRelease) bool { return r.minor == minor }); i >= 0 {
			return nil, fmt.Errorf("%s and %s both name Istio 1.%d", out[i].modfile, filepath.Base(f), minor)
		}
		out = append(out, istioRelease{release: "1." + string(m[1]), minor: minor, modfile: filepath.Base(f)})
	}
	slices.SortFunc(out, func(a, b istioRelease) int { return b.minor - a.minor })
	if len(out) < 2 {
		return nil, fmt.Errorf("istioinject has %d Istio releases, want the newest and an older one", len(out))
	}
	return out, nil
})

// eachIstio runs test once per Istio release, as a subtest named after it.
// The older releases run under ISTIO_RELEASES=all only: each compiles Istio's
// module and its own client-go once more, about 20 minutes of a cold build on a
// busy 2-core machine, which make test's cold run cannot afford; without it
// they are skipped, saying how to run them.
func eachIstio(t *testing.T, test func(*testing.T, istioRelease)) {
	releases, err := istios()
	if err != nil {
		t.Fatal(err)
	}
	all := os.Getenv("ISTIO_RELEASES") == "all"
	for i, r := range releases {
		t.Run("istio-"+r.release, func(t *testing.T) {
			if i > 0 && !all {
				t.Skipf("an older Istio release: ISTIO_RELEASES=all make test-deploy renders it too")
			}
			test(t, r)
		})
	}
}

// binary builds istioinject at the release, once.
func (r istioRelease) binary(t *testing.T) string {
	t.Helper()
	return program(t, "istioinject", r.modfile)
}

// run runs istioinject at the release; stderr is its error.
func (r istioRelease) run(t *testing.T, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(r.binary(t), args...)
	// Not the caller's environment: Istio reads feature flags from it
	// (ENABLE_NATIVE_SIDECARS among them), which would change what it
	// injects. Its temporary files go to the tests' work dir.
	cmd.Env = []string{"TMPDIR=" + work}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("Istio %s: %v: %s", r.release, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// file is a file of the release's embedded manifests (charts/...).
func (r istioRelease) file(t *testing.T, path string) []byte {
	t.Helper()
	out, err := r.run(t, nil, "file", path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// injector is istiod's injection configuration at one release, rendered by
// Istio's own installer from its embedded charts with our Helm values
// merged in.
type injector struct {
	istio  istioRelease
	config string // istioinject render's output
}

var injectors sync.Map // release and --set flags → *injector; rendering the charts takes a while

// injector renders istiod's charts with deploy/istio/values.yaml (as
// spec.values of an IstioOperator) and extra --set flags.
func (r istioRelease) injector(t *testing.T, set ...string) *injector {
	t.Helper()
	key := r.release + " " + strings.Join(set, " ")
	if in, ok := injectors.Load(key); ok {
		return in.(*injector)
	}
	out, err := r.run(t, nil, append([]string{"render", istioValues}, set...)...)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Config string `json:"config"` // istioinject's output, as its doc says
	}
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("Istio %s: render: %v", r.release, err)
	}
	var cfg struct{ Templates map[string]string }
	if err := yaml.Unmarshal([]byte(c.Config), &cfg); err != nil {
		t.Fatalf("Istio %s: the injection config: %v", r.release, err)
	}
	if cfg.Templates[ourTemplate] == "" {
		t.Fatalf("Istio %s: istiod's charts rendered no %q template", r.release, ourTemplate)
	}
	f, err := os.CreateTemp(work, "injector-")
	if err == nil {
		_, err = f.Write(out)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	in, _ := injectors.LoadOrStore(key, &injector{istio: r, config: f.Name()})
	return in.(*injector)
}

// inject runs Istio's injector (inject.IntoResourceFile, what istioctl
// kube-inject runs) on a Job's YAML.
func (in *injector) inject(t *testing.T, job []byte) ([]byte, error) {
	t.Helper()
	return in.istio.run(t, job, "inject", in.config)
}
