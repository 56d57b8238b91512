package kubelettest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
	"github.com/proxy-supervisor/proxy-supervisor/kubelettest/internal/builds"
)

// theRelease is what make release built for the cluster mode and pushed to
// the node's registry, or in missing why there is none: TestClusterHelm
// alone needs it.
var theRelease release

// registryAddr is the node's registry, on the node's loopback, where
// containerd pulls the release's images and helm its chart. containerd
// reaches it over plain HTTP by its hosts.toml (writeConfigs).
const registryAddr = "127.0.0.1:5000"

// release is make release's output (scripts/release.sh into dist), the
// tools that made it (scripts/tools.sh), and what it published, by digest
// in the node's registry: the images by name (client, envoy, proxyv2) and
// the chart.
type release struct {
	dist    string
	tools   string
	images  map[string]string
	chart   string
	missing string
}

// makeRelease starts the node's registry (its storage in dir) and runs make
// release into dir, pushing there (RELEASE_REGISTRY, release.sh run in the
// node's network namespace), as a release without docker.io does
// (RELEASE_BASES=standin), the Envoy stand-in holding the fake Envoy for
// each platform (RELEASE_STANDIN_ENVOY), so that its envoy image runs in
// the node. release.sh verifies every piece before it ends; the suite
// verifies the signatures again, from the node's registry, before it uses
// them (TestClusterHelm).
func makeRelease(n *node, dir string) release {
	start := time.Now()
	tools, err := builds.Tools()
	if err != nil {
		return release{missing: err.Error()}
	}
	// release.sh runs helm (deploytest's go.mod tool) in the node's network
	// namespace, which has no route out: built here first, its modules come
	// from the module proxy. Only make test's deploytest stage had built it
	// before, so a cold make test-kubelet failed here.
	if _, err := helmBinary(); err != nil {
		return release{missing: fmt.Sprintf("go tool -n helm (deploytest/go.mod): %v", err)}
	}
	if err := n.startRegistry(filepath.Join(tools, "registry"), filepath.Join(dir, "registry")); err != nil {
		return release{missing: err.Error()}
	}
	standin := filepath.Join(dir, "standin")
	for _, p := range strings.Fields(releaseEnv("PLATFORMS")) {
		goos, goarch, _ := strings.Cut(p, "/")
		if err := proctest.StaticFor(proctest.FakeEnvoy, filepath.Join(standin, "envoy-"+goos+"-"+goarch), goarch); err != nil {
			return release{missing: fmt.Sprintf("the fake Envoy for %s: %v", p, err)}
		}
	}
	dist := filepath.Join(dir, "dist")
	log := filepath.Join(dir, "release.log")
	out, err := os.Create(log)
	if err != nil {
		return release{missing: err.Error()}
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// The network namespace alone: release.sh's buildah makes a mount
	// namespace of its own, from the host's.
	argv := proctest.Nsenter(n.holder.Process.Pid, []string{"net"}, "bash", "scripts/release.sh")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "DIST="+dist, "RELEASE_REGISTRY="+registryAddr,
		"RELEASE_BASES=standin", "RELEASE_STANDIN_ENVOY="+standin)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(log)
		return release{missing: fmt.Sprintf("make release: %v: %s", err, builds.LastLine(string(b)))}
	}
	r := release{dist: dist, tools: tools, images: map[string]string{}}
	if r.chart, err = r.published("charts.txt"); err != nil {
		return release{missing: err.Error()}
	}
	images, err := os.ReadFile(filepath.Join(dist, "images.txt"))
	if err != nil {
		return release{missing: err.Error()}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(images)), "\n") {
		ref, err := r.inRegistry(line)
		if err != nil {
			return release{missing: err.Error()}
		}
		name, _, _ := strings.Cut(filepath.Base(ref), "@")
		r.images[name] = ref
	}
	for _, name := range []string{"client", "envoy", "proxyv2"} {
		if r.images[name] == "" {
			return release{missing: fmt.Sprintf("make release: images.txt names no %s image:\n%s", name, images)}
		}
	}
	fmt.Printf("kubelettest: make release (stand-in bases) in %s\n", time.Since(start).Round(100*time.Millisecond))
	return r
}

// published is the one reference the dist file name lists, in the node's
// registry.
func (r release) published(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(r.dist, name))
	if err != nil {
		return "", err
	}
	return r.inRegistry(strings.TrimSpace(string(b)))
}

// inRegistry is a line of images.txt or charts.txt
// (REGISTRY/PATH:TAG@DIGEST, perhaps followed by a note) as the node pulls
// it: registryAddr/REPOSITORY/PATH@DIGEST, images/release.env's REGISTRY
// being HOST/REPOSITORY.
func (r release) inRegistry(line string) (string, error) {
	registry := releaseEnv("REGISTRY")
	ref, _, _ := strings.Cut(line, " ")
	named, digest, ok := strings.Cut(ref, "@")
	path, found := strings.CutPrefix(named, registry+"/")
	if !ok || !found || !strings.HasPrefix(digest, "sha256:") {
		return "", fmt.Errorf("make release published %q, not %s/PATH:TAG@sha256:DIGEST", line, registry)
	}
	path, _, _ = strings.Cut(path, ":")
	_, repository, _ := strings.Cut(registry, "/")
	return registryAddr + "/" + repository + "/" + path + "@" + digest, nil
}

// cosign runs the release's cosign in the node's network namespace, where
// the registry listens, its HOME a directory of the test's.
func (r release) cosign(ctx context.Context, home string, args ...string) (string, error) {
	argv := append([]string{"/usr/bin/env", "HOME=" + home, "COSIGN_PASSWORD=", filepath.Join(r.tools, "cosign")}, args...)
	b, err := theNode.nsenter(ctx, argv...).CombinedOutput()
	return string(b), err
}

// needRelease is the release, or skips the test (fails it under CI=true)
// where there is none.
func needRelease(t *testing.T) release {
	t.Helper()
	if theRelease.missing == "" {
		return theRelease
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("kubelettest: no release (%s); CI=true, so this fails", theRelease.missing)
	}
	t.Skipf("kubelettest: SKIPPED, no release: %s", theRelease.missing)
	return release{}
}

// verify checks, from the node's registry as an admission check would,
// each image index's and the chart's signature and the envoy image's SBOM
// attestations (SPDX and CycloneDX) against the release's key, and that a
// key of another's verifies none of them.
func (r release) verify(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	home := t.TempDir()
	insecure := []string{"--insecure-ignore-tlog=true", "--allow-insecure-registry", "--allow-http-registry"}
	refs := append(slices.Sorted(maps.Values(r.images)), r.chart)
	check := func(key string, ref string, args ...string) (string, error) {
		return r.cosign(ctx, home, slices.Concat(args, []string{"--key", key}, insecure, []string{ref})...)
	}
	pub := filepath.Join(r.dist, "cosign.pub")
	for _, ref := range refs {
		if out, err := check(pub, ref, "verify"); err != nil {
			t.Fatalf("cosign verify %s: %v\n%s", ref, err, out)
		}
	}
	for _, typ := range []string{"spdxjson", "cyclonedx"} {
		if out, err := check(pub, r.images["envoy"], "verify-attestation", "--type", typ); err != nil {
			t.Fatalf("cosign verify-attestation --type %s %s: %v\n%s", typ, r.images["envoy"], err, out)
		}
	}
	if out, err := r.cosign(ctx, home, "generate-key-pair", "--output-key-prefix", filepath.Join(home, "other")); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	for _, ref := range refs {
		out, err := check(filepath.Join(home, "other.pub"), ref, "verify")
		if err == nil || !strings.Contains(out, "no matching") {
			t.Fatalf("cosign verify %s with a key not the release's: %v, want no matching signature:\n%s", ref, err, out)
		}
	}
}
