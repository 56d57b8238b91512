package kubelettest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// controlPlane is the built control plane of the cluster mode: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, or why there
// is none.
type controlPlane struct {
	etcd, apiserver, controllerManager, scheduler string
	missing                                       string
}

// controlPlaneCmds are the control plane's programs, as controlplane/
// pins them.
var controlPlaneCmds = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// buildControlPlane builds the control plane into the kubelet's cache
// directory, once per Kubernetes and Go version (minutes cold, nothing
// cached), and fetches etcd beside it.
func buildControlPlane() controlPlane {
	cache, err := os.UserCacheDir()
	if err != nil {
		return controlPlane{missing: "a cache directory: " + err.Error()}
	}
	dir := filepath.Join(cache, "proxy-supervisor-kubelet", kubeletVersion+"-"+runtime.Version())
	bins := map[string]string{}
	var todo []string
	for _, c := range controlPlaneCmds {
		bins[c] = filepath.Join(dir, c)
		if _, err := os.Stat(bins[c]); err != nil {
			todo = append(todo, c)
		}
	}
	if len(todo) > 0 {
		fmt.Printf("kubelettest: building %s %s into %s (many minutes from a cold Go cache)\n", strings.Join(todo, ", "), kubeletVersion, dir)
		// A directory per run: concurrent runs each build their own.
		tmp := filepath.Join(dir, fmt.Sprintf("controlplane.tmp%d", os.Getpid()))
		defer os.RemoveAll(tmp)
		args := []string{"-tags", "tools"}
		for _, c := range todo {
			args = append(args, "k8s.io/kubernetes/cmd/"+c)
		}
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return controlPlane{missing: err.Error()}
		}
		if err := proctest.GoBuild("controlplane", tmp+"/", args...); err != nil {
			return controlPlane{missing: "the control plane did not build: " + lastLine(err.Error())}
		}
		for _, c := range todo {
			if err := os.Rename(filepath.Join(tmp, c), bins[c]); err != nil {
				return controlPlane{missing: err.Error()}
			}
		}
	}
	etcd, err := fetchEtcd(filepath.Join(cache, "proxy-supervisor-kubelet"))
	if err != nil {
		return controlPlane{missing: err.Error()}
	}
	return controlPlane{etcd: etcd, apiserver: bins["kube-apiserver"],
		controllerManager: bins["kube-controller-manager"], scheduler: bins["kube-scheduler"]}
}

// etcdPackage is Debian's etcd server, which the cluster mode unpacks
// (never installs: its scripts would start a service).
const etcdPackage = "etcd-server"

// fetchEtcd is an etcd on PATH, or Debian's etcd-server unpacked into the
// cache: `apt-get download` and `dpkg-deb -x`, nothing installed.
func fetchEtcd(cache string) (string, error) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	root := filepath.Join(cache, etcdPackage)
	bin := filepath.Join(root, "usr", "bin", "etcd")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	for _, c := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(c); err != nil {
			return "", fmt.Errorf("etcd: no etcd on PATH and no %s to fetch Debian's %s", c, etcdPackage)
		}
	}
	fmt.Printf("kubelettest: fetching Debian's %s into %s\n", etcdPackage, root)
	tmp, err := os.MkdirTemp(cache, etcdPackage+".tmp")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	dl := exec.Command("apt-get", "download", etcdPackage)
	dl.Dir = tmp
	if out, err := dl.CombinedOutput(); err != nil {
		return "", fmt.Errorf("etcd: apt-get download %s: %v: %s", etcdPackage, err, lastLine(string(out)))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, etcdPackage+"_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("etcd: apt-get download %s left %d packages", etcdPackage, len(debs))
	}
	tree := filepath.Join(tmp, "tree")
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], tree).CombinedOutput(); err != nil {
		return "", fmt.Errorf("etcd: dpkg-deb -x: %v: %s", err, out)
	}
	if err := os.Rename(tree, root); err != nil {
		// A concurrent run may have put its own there first.
		if _, statErr := os.Stat(bin); statErr != nil {
			return "", errors.Join(err, statErr)
		}
	}
	return bin, nil
}

// lastLine is the last non-empty line of s: a build's reason.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// needCluster skips a test that needs the API server when the node has
// none, and fails it under CI=true, as the suite's own skip does.
func needCluster(t *testing.T) *cluster {
	t.Helper()
	if c := theNode.cluster; c != nil {
		return c
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("kubelettest: no control plane (%s); CI=true, so this fails", theControlPlane.missing)
	}
	t.Skipf("kubelettest: SKIPPED, no control plane: %s", theControlPlane.missing)
	return nil
}
