// Package builds makes the real Kubernetes programs that the suite runs:
// the kubelet and the control plane, compiled from the modules that
// kubelet/ and controlplane/ pin into the user's cache, once per Kubernetes
// and Go version, and Debian's etcd unpacked beside them; and the release
// tools the cluster mode's make release runs (scripts/tools.sh).
//
// It imports only the standard library and proctest, so that make
// kubelet-builds (cmd/kubelet-builds) can run from make test's start
// without compiling the suite's client packages, which deploytest/ is
// compiling at the same time: two go commands compiling the same package
// at once each compile it.
//
// The module directories are relative to the working directory, which is
// kubelettest/ for the suite's tests and for make's go run alike.
package builds

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// ldflags leave out the symbol table and DWARF, which nothing here reads:
// generating DWARF is much of a Kubernetes binary's link, four times over.
// They stamp the version v as Kubernetes' own build does
// (hack/lib/version.sh): unstamped, the API server says v0.0.0-master at
// /version, and a client that checks it, such as helm against a chart's
// kubeVersion, refuses it.
func ldflags(v string) []string { return []string{"-ldflags", "-s -w " + stamp(v)} }

// stamp is the -X flags that give component-base and client-go the version.
func stamp(v string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var b strings.Builder
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&b, " -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean", pkg, v, pkg, major, pkg, minor, pkg)
	}
	return strings.TrimSpace(b.String())
}

// cacheRoot is where the builds of every version are cached.
func cacheRoot() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "proxy-supervisor-kubelet"), nil
}

// dir is where the builds of Kubernetes v are cached.
func dir(v string) (string, error) {
	cache, err := cacheRoot()
	if err != nil {
		return "", err
	}
	// The flags are in the name: binaries linked with others are not these.
	flags := sha256.Sum256([]byte(strings.Join(ldflags(v), " ")))
	return filepath.Join(cache, fmt.Sprintf("%s-%s-%x", v, runtime.Version(), flags[:4])), nil
}

// Missing lists what the suite needs and the machine lacks: where it is
// not empty, the suite skips, and nothing needs building.
func Missing() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	var cmds []string
	for _, c := range []struct{ cmd, pkg string }{
		{"containerd", "containerd"}, {"ctr", "containerd"}, {"runc", "runc"}, {"ip", "iproute2"},
		{"unshare", "util-linux"}, {"nsenter", "util-linux"}, {"mount", "mount"}, {"go", "Go"},
	} {
		if _, err := exec.LookPath(c.cmd); err != nil {
			cmds = append(cmds, c.cmd+" ("+c.pkg+")")
		}
	}
	if len(cmds) > 0 {
		missing = append(missing, "commands "+strings.Join(cmds, ", "))
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", p)); err != nil {
			missing = append(missing, "/usr/lib/cni/"+p+" (containernetworking-plugins)")
		}
	}
	if len(missing) == 0 {
		if out, err := exec.Command("unshare", "--mount", "--net", "true").CombinedOutput(); err != nil {
			missing = append(missing, fmt.Sprintf("mount and network namespaces (%v: %s)", err, strings.TrimSpace(string(out))))
		}
	}
	return missing
}

// Kubelet is the kubelet's path, built first when the cache lacks it (a
// cold build takes minutes, a cached one nothing).
func Kubelet() (string, error) {
	v, err := Version()
	if err != nil {
		return "", err
	}
	d, err := dir(v)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(d, "kubelet")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	mod, err := moduleDir(filepath.Dir(d), "kubelet", v)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	fmt.Printf("kubelettest: building kubelet %s into %s (minutes from a cold Go cache)\n", v, bin)
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid()) // concurrent runs each build their own
	args := append([]string{"-tags", "tools"}, ldflags(v)...)
	if err := proctest.GoBuild(mod, tmp, append(args, "k8s.io/kubernetes/cmd/kubelet")...); err != nil {
		return "", err
	}
	return bin, os.Rename(tmp, bin)
}

// ControlPlane is the cluster mode's control plane: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, or, in Missing, why there is
// none.
type ControlPlane struct {
	Etcd, APIServer, ControllerManager, Scheduler string
	Missing                                       string
}

// controlPlaneCmds are the control plane's programs, as controlplane/
// pins them.
var controlPlaneCmds = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// BuildControlPlane is the control plane, built into the kubelet's cache
// directory when the cache lacks it (many minutes cold, nothing cached),
// with etcd fetched beside it.
func BuildControlPlane() ControlPlane {
	v, err := Version()
	if err != nil {
		return ControlPlane{Missing: err.Error()}
	}
	d, err := dir(v)
	if err != nil {
		return ControlPlane{Missing: "a cache directory: " + err.Error()}
	}
	bins := map[string]string{}
	var todo []string
	for _, c := range controlPlaneCmds {
		bins[c] = filepath.Join(d, c)
		if _, err := os.Stat(bins[c]); err != nil {
			todo = append(todo, c)
		}
	}
	if len(todo) > 0 {
		mod, err := moduleDir(filepath.Dir(d), "controlplane", v)
		if err != nil {
			return ControlPlane{Missing: err.Error()}
		}
		fmt.Printf("kubelettest: building %s %s into %s (many minutes from a cold Go cache)\n", strings.Join(todo, ", "), v, d)
		// A directory per run: concurrent runs each build their own.
		tmp := filepath.Join(d, fmt.Sprintf("controlplane.tmp%d", os.Getpid()))
		defer os.RemoveAll(tmp)
		args := append([]string{"-tags", "tools"}, ldflags(v)...)
		for _, c := range todo {
			args = append(args, "k8s.io/kubernetes/cmd/"+c)
		}
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return ControlPlane{Missing: err.Error()}
		}
		if err := proctest.GoBuild(mod, tmp+"/", args...); err != nil {
			return ControlPlane{Missing: "the control plane did not build: " + LastLine(err.Error())}
		}
		for _, c := range todo {
			if err := os.Rename(filepath.Join(tmp, c), bins[c]); err != nil {
				return ControlPlane{Missing: err.Error()}
			}
		}
	}
	etcd, err := fetchEtcd(filepath.Dir(d))
	if err != nil {
		return ControlPlane{Missing: err.Error()}
	}
	return ControlPlane{Etcd: etcd, APIServer: bins["kube-apiserver"],
		ControllerManager: bins["kube-controller-manager"], Scheduler: bins["kube-scheduler"]}
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
		return "", fmt.Errorf("etcd: apt-get download %s: %v: %s", etcdPackage, err, LastLine(string(out)))
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

// Tools is the directory of the release tools that tools/go.mod pins
// (syft, cosign, the CNCF distribution registry), which scripts/tools.sh
// builds into the user's cache when it lacks them (minutes cold).
func Tools() (string, error) {
	var stderr strings.Builder
	cmd := exec.Command("bash", "../scripts/tools.sh")
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr) // what it builds, and why it failed
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("the release tools did not build (scripts/tools.sh): %v: %s", err, LastLine(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// LastLine is the last non-empty line of s: a build's or a command's
// reason.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
