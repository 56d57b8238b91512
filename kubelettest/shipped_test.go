package kubelettest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/kubelettest/internal/builds"
)

// theShipped is why the shipped images were not built, or "" when the
// node runs them: the client image of the classic forms' install
// container, the Envoy image of the native form's one container and the
// Istio image of the pilot-agent scenarios, built from images/ as users
// build them.
var theShipped string

// binaryImage holds the binary the suite built at /out/proxy-supervisor:
// the Dockerfiles' BINARY, in place of their build stage (which needs the
// golang image from a registry).
const binaryImage = "docker.io/proxy-supervisor-test/binary:dev"

// The Istio image without the supervisor: the Dockerfile's
// ${ISTIO_HUB}/proxyv2:${ISTIO_VERSION}, in place of Istio's proxyv2; and
// envoyBase, the fake Envoy as Envoy's image has envoy, without the
// supervisor: envoy.Dockerfile's ${ENVOY_IMAGE}:${ENVOY_VERSION}.
const (
	istioHub     = "docker.io/proxy-supervisor-test"
	istioBaseTag = "base"
	istioBase    = istioHub + "/proxyv2:" + istioBaseTag
	envoyBase    = istioHub + "/envoy:" + istioBaseTag
)

// buildah runs buildah on a store of its own under dir, which goes with
// dir, in a mount namespace of its own whose /var/lib and /run are tmpfs:
// buildah also writes a blob cache under /var/lib/containers and network
// configuration under /run/containers, whatever its store, and nothing may
// be left on the machine.
type buildah struct{ dir string }

func (b buildah) run(args ...string) (string, error) {
	args = append([]string{"--root", filepath.Join(b.dir, "storage"), "--runroot", filepath.Join(b.dir, "run"), "--storage-driver", "vfs"}, args...)
	const private = `mount -t tmpfs -o mode=0755 tmpfs /var/lib && mount -t tmpfs -o mode=0755 tmpfs /run && exec buildah "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", private, "buildah"}, args...)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(b.dir, "tmp"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("buildah %s: %v: %s", strings.Join(args[6:], " "), err, builds.LastLine(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// load puts an OCI archive of writeImage's into the store as name.
func (b buildah) load(tar, name string) error {
	out, err := b.run("pull", "-q", "oci-archive:"+tar)
	if err != nil {
		return err
	}
	_, err = b.run("tag", builds.LastLine(out), name)
	return err
}

// buildShipped builds images/client.Dockerfile, images/envoy.Dockerfile
// and images/proxy.Dockerfile with buildah, the binary from binaryTar, the
// Envoy base from envoyTar and the Istio base from baseTar, and writes each
// as a Docker archive that containerd imports under the name given: the
// client and Envoy images under the manifests' own names, the proxy image
// as the suite's Istio image.
func buildShipped(dir, binaryTar, envoyTar, baseTar string) (map[string]string, error) {
	if _, err := exec.LookPath("buildah"); err != nil {
		return nil, fmt.Errorf("buildah (Debian's buildah) is not installed")
	}
	b := buildah{dir: filepath.Join(dir, "buildah")}
	if err := os.MkdirAll(filepath.Join(b.dir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	if err := b.load(binaryTar, binaryImage); err != nil {
		return nil, err
	}
	if err := b.load(envoyTar, envoyBase); err != nil {
		return nil, err
	}
	if baseTar != "" {
		if err := b.load(baseTar, istioHub+"/proxyv2:"+istioBaseTag); err != nil {
			return nil, err
		}
	}
	builds := []struct {
		file, name string
		args       []string
	}{
		{"images/client.Dockerfile", clientImage, nil},
		{"images/envoy.Dockerfile", shippedEnvoyImage, []string{"--build-arg", "ENVOY_IMAGE=" + istioHub + "/envoy", "--build-arg", "ENVOY_VERSION=" + istioBaseTag}},
		{"images/proxy.Dockerfile", istioImage, []string{"--build-arg", "ISTIO_HUB=" + istioHub, "--build-arg", "ISTIO_VERSION=" + istioBaseTag}},
	}
	tars := map[string]string{}
	for i, bd := range builds {
		if bd.name == istioImage && baseTar == "" {
			continue // no pilot-agent: no Istio image
		}
		args := append([]string{"bud", "-q", "--pull-never", "-f", bd.file, "--build-arg", "BINARY=" + binaryImage, "-t", bd.name}, bd.args...)
		if _, err := b.run(append(args, ".")...); err != nil {
			return nil, err
		}
		out := filepath.Join(dir, fmt.Sprintf("shipped%d.tar", i))
		if _, err := b.run("push", "-q", bd.name, "docker-archive:"+out+":"+bd.name); err != nil {
			return nil, err
		}
		tars[bd.name] = out
	}
	return tars, nil
}

// The shipped images are built from images/ and run: the classic forms'
// install container runs the client image, the native form's one
// container the Envoy image, and the pilot-agent scenarios the proxy
// image, as built.
func TestShippedImages(t *testing.T) {
	if theShipped != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubelettest: the shipped images were not built (%s); CI=true, so this fails", theShipped)
		}
		t.Skipf("kubelettest: SKIPPED, the shipped images were not built: %s", theShipped)
	}
	out, err := theNode.ctr("images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{clientImage, shippedEnvoyImage, istioImage} {
		if name == istioImage && theAgent.missing != "" {
			continue
		}
		if !strings.Contains(out, name) {
			t.Fatalf("the node has no image %s:\n%s", name, out)
		}
		note(t, "%s built from images/", name)
	}
}
