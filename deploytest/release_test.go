package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// release is what one place each names, and make manifests writes into
// deploy/ and the chart: the registry of every image of ours
// (images/release.env's REGISTRY), their tag (VERSION) and the Envoy
// release the plain-Envoy manifests run (images/envoy.Dockerfile's
// ENVOY_VERSION).
type release struct{ registry, version, envoy string }

func theRelease(t *testing.T) release {
	t.Helper()
	read := func(path, pattern string) string {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(pattern).FindSubmatch(raw)
		if m == nil {
			t.Fatalf("%s: no %s", path, pattern)
		}
		return strings.TrimSpace(string(m[1]))
	}
	return release{
		registry: read(releaseEnv, `(?m)^REGISTRY=(\S+)$`),
		version:  read(versionFile, `^(\S+)\s*$`),
		envoy:    read(root+"/images/envoy.Dockerfile", `(?m)^ARG ENVOY_VERSION=(\S+)$`),
	}
}

// image is an image of ours by its release name.
func (r release) image(name string) string { return r.registry + "/" + name + ":" + r.version }

// Every image that deploy/ and the chart name is the release's: ours at
// REGISTRY with VERSION's tag (the proxy image's after Istio's tag), and
// Envoy's at ENVOY_VERSION, never a floating tag.
func TestManifestsNameTheRelease(t *testing.T) {
	t.Parallel()
	r := theRelease(t)
	files, _ := filepath.Glob(root + "/deploy/*/*.yaml")
	chart, _ := filepath.Glob(chartDir + "/*.yaml")
	templates, _ := filepath.Glob(chartDir + "/templates/*")
	// The names make manifests rewrites, by the same pattern (its tag
	// characters included): a name it would not rewrite is not one it fixes.
	ours := regexp.MustCompile(`(^|[^\w./:-])([a-z0-9.:-]+(/[a-z0-9._-]+)*/(client|envoy|proxyv2):(%s-)?[A-Za-z0-9_.-]+)`)
	seen := map[string]int{}
	for _, f := range append(append(files, chart...), templates...) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ours.FindAllStringSubmatch(string(raw), -1) {
			ref := m[2]
			name, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
			repo := ref[:strings.LastIndex(ref, "/")]
			var want string
			switch {
			case repo == "envoyproxy" && name == "envoy":
				want = "envoyproxy/envoy:" + r.envoy
				name = "Envoy's own"
			case name == "proxyv2":
				want = r.registry + "/proxyv2:%s-" + r.version
			default:
				want = r.image(name)
			}
			seen[name]++
			if ref != want {
				t.Errorf("%s names %s (tag %s), want %s: run make manifests", f, ref, tag, want)
			}
		}
	}
	// The forms that name them: the classic manifests' client image and
	// Envoy's own, the native one's Envoy image, the Istio template's client
	// and proxy images.
	for name, n := range map[string]int{"client": 6, "Envoy's own": 4, "envoy": 1, "proxyv2": 1} {
		if seen[name] < n {
			t.Errorf("deploy/ names %d %s images, want at least %d: a form lost its image, or the check proves nothing", seen[name], name, n)
		}
	}
	// The chart's default image is the release's.
	if out := renderChart(t, newestMinor+".0"); !strings.Contains(out, "'"+r.image("envoy")+"'") {
		t.Errorf("the chart's default image is not %s", r.image("envoy"))
	}
}
