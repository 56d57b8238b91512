package kubelettest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
	"github.com/proxy-supervisor/proxy-supervisor/kubelettest/internal/builds"
)

const (
	nodeName = "kubelettest"
	// nodeIP is the node's address, on the node's loopback: the kubelet
	// needs one that exists (else it looks its name up in DNS at each sync).
	nodeIP = "10.213.0.1"
	// podSubnet is the bridge's, in the node's network namespace only.
	podSubnet  = "10.213.1.0/24"
	pauseImage = "docker.io/proxy-supervisor-test/pause:dev"
	envoyImage = "docker.io/proxy-supervisor-test/envoy:dev"
	appImage   = "docker.io/proxy-supervisor-test/app:dev"
	criSocket  = "/run/containerd/containerd.sock"
)

// The shipped images under the manifests' own names (the release's, which
// make manifests writes into deploy/): the client image, and the Envoy
// image, images/envoy.Dockerfile built on a base of the fake Envoy
// (envoyBase) as on Envoy's image.
var (
	clientImage       = releaseImage("client")
	shippedEnvoyImage = releaseImage("envoy")
)

// releaseImage is an image of ours by its release name:
// images/release.env's REGISTRY, VERSION's tag.
func releaseImage(name string) string {
	version, err := os.ReadFile("../VERSION")
	if err != nil {
		panic(err)
	}
	return releaseEnv("REGISTRY") + "/" + name + ":" + strings.TrimSpace(string(version))
}

// releaseEnv is the value images/release.env gives key, unquoted.
func releaseEnv(key string) string {
	env, err := os.ReadFile("../images/release.env")
	if err != nil {
		panic(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `=(.*)$`).FindSubmatch(env)
	if m == nil {
		panic("images/release.env sets no " + key)
	}
	return strings.Trim(string(m[1]), `"`)
}

// maskedSysctls are the VM-wide files the kubelet writes at start; in the
// node's mount namespace each is a copy, so the host keeps its values.
var maskedSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// node is containerd and a standalone kubelet in their own mount and network
// namespaces, held by a holder process; dir holds their configuration,
// logs, the images and the static pod manifests.
type node struct {
	dir        string
	holder     *exec.Cmd
	containerd *exec.Cmd
	kubelet    *exec.Cmd
	// registry serves the release's images and chart (registryAddr), nil
	// without a release.
	registry   *exec.Cmd
	cgroupRoot string
	client     *http.Client
	// cluster is the control plane the kubelet is registered with, nil
	// when the node runs without one (static pods only).
	cluster *cluster
}

func (n *node) manifests() string { return filepath.Join(n.dir, "manifests") }

// startNode starts the node, with the control plane when cp has one. On
// error, what was started is stopped.
func startNode(kubelet string, images []string, cp builds.ControlPlane) (n *node, err error) {
	sweepStale()
	dir, err := os.MkdirTemp("", fmt.Sprintf("kubelettest-%d-", os.Getpid()))
	if err != nil {
		return nil, err
	}
	n = &node{dir: dir, cgroupRoot: fmt.Sprintf("/proxy-supervisor-kubelettest-%d", os.Getpid())}
	if cp.Missing == "" {
		n.cluster = &cluster{pki: filepath.Join(dir, "pki")}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.logTails())
			n.stop()
		}
	}()
	for _, d := range []string{"manifests", "cni", "sysctl", "certs.d/" + registryAddr} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return n, err
		}
	}
	if err := n.writeConfigs(); err != nil {
		return n, err
	}
	if err := n.makeCgroupRoot(); err != nil {
		return n, err
	}
	if err := n.startHolder(); err != nil {
		return n, fmt.Errorf("namespaces: %w", err)
	}
	if err := n.adopt(n.holder.Process.Pid); err != nil {
		return n, err
	}
	n.client = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:     n.netns().Dial,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the kubelet's self-signed serving cert
		},
	}
	n.containerd, err = n.daemon("containerd", "containerd", "--config", filepath.Join(dir, "containerd.toml"))
	if err != nil {
		return n, err
	}
	if err := proctest.Poll(30*time.Second, func() error { _, err := n.ctr("version"); return err }); err != nil {
		return n, fmt.Errorf("containerd does not answer: %w", err)
	}
	for _, img := range images {
		if out, err := n.ctr("images", "import", img); err != nil {
			return n, fmt.Errorf("import %s: %w: %s", img, err, out)
		}
	}
	args := []string{"--config", filepath.Join(dir, "kubelet.yaml"), "--hostname-override", nodeName, "--node-ip", nodeIP, "-v", "3"}
	if n.cluster != nil {
		if err := n.startAPIServer(cp); err != nil {
			return n, err
		}
		args = append(args, n.cluster.kubeletArgs()...)
	}
	n.kubelet, err = n.daemon("kubelet", append([]string{kubelet}, args...)...)
	if err != nil {
		return n, err
	}
	if err := proctest.Poll(60*time.Second, func() error { _, err := n.pods(); return err }); err != nil {
		return n, fmt.Errorf("the kubelet's API does not answer: %w", err)
	}
	if n.cluster != nil {
		if err := n.startControllers(cp); err != nil {
			return n, fmt.Errorf("the cluster: %w", err)
		}
	}
	return n, nil
}

func (n *node) writeConfigs() error {
	containerd := fmt.Sprintf(`version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Without CAP_SYS_RESOURCE runc cannot lower a process's oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  # The registries' hosts.toml files: the node's registry is plain HTTP.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, criSocket, pauseImage, filepath.Join(n.dir, "cni"), filepath.Join(n.dir, "certs.d"))
	// containerd's hosts.toml for the node's registry: a cluster's own
	// registry without TLS is configured so (containerd's docs/hosts.md).
	hosts := fmt.Sprintf(`server = "http://%[1]s"
[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`, registryAddr)
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "kubelettest", "plugins": [
  {"type": "bridge", "bridge": "kt-pods", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": "/run/cni-ipam"}}]}
`, podSubnet)
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %s
fileCheckFrequency: 1s
address: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: %s
# Machines with cgroup v1 (or a hybrid layout) and swap are welcome.
failCgroupV1: false
failSwapOn: false
# Without CAP_SYS_RESOURCE the kubelet cannot lower its own score either.
oomScoreAdj: 0
resolvConf: ""
# The imported images cannot be pulled again: never collect them, and
# never evict a pod for a host's full disk or memory.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
`, n.manifests(), criSocket, n.cgroupRoot)
	if n.cluster != nil {
		kubelet += n.cluster.kubeletConfig()
	}
	for name, data := range map[string]string{
		"containerd.toml":                         containerd,
		"cni/10-kubelettest.conflist":             cni,
		"kubelet.yaml":                            kubelet,
		"certs.d/" + registryAddr + "/hosts.toml": hosts,
	} {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1 and v2).
func cgroupHierarchies() []string {
	mounts, _ := os.ReadFile("/proc/self/mounts")
	var dirs []string
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && (f[2] == "cgroup" || f[2] == "cgroup2") {
			dirs = append(dirs, f[1])
		}
	}
	return dirs
}

// makeCgroupRoot makes the kubelet's cgroup root in every hierarchy (the
// kubelet requires it to exist), and in it the node's own cgroup, which the
// holder, the daemons and so the shims join: every process of the node is
// in the tree, which teardown kills and removes whole.
func (n *node) makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		parent := h
		for _, dir := range []string{filepath.Join(h, n.cgroupRoot), filepath.Join(h, n.cgroupRoot, "node")} {
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			// A v1 cpuset cgroup starts with no CPU and no memory node,
			// and takes no process until given its parent's.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if v, err := os.ReadFile(filepath.Join(parent, f)); err == nil {
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("cgroup: %w", err)
					}
				}
			}
			parent = dir
		}
	}
	return nil
}

// adopt moves a process into the node's cgroup.
func (n *node) adopt(pid int) error {
	for _, h := range cgroupHierarchies() {
		procs := filepath.Join(h, n.cgroupRoot, "node", "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// sweepStale kills and removes what a run killed before its teardown (a
// test binary's timeout, say) left: the cgroup trees and the temporary
// directories named after processes gone.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "kubelettest-*-*"))
	for _, d := range dirs {
		f := strings.Split(filepath.Base(d), "-")
		if pid, err := strconv.Atoi(f[len(f)-2]); err == nil && alive(pid) == nil {
			os.RemoveAll(d) //nolint:errcheck // best effort; its mounts went with its namespace
		}
	}
	seen := map[string]bool{}
	for _, h := range cgroupHierarchies() {
		dirs, _ := filepath.Glob(filepath.Join(h, "proxy-supervisor-kubelettest-*"))
		for _, d := range dirs {
			root := "/" + filepath.Base(d)
			pid, err := strconv.Atoi(strings.TrimPrefix(root, "/proxy-supervisor-kubelettest-"))
			if err != nil || seen[root] || alive(pid) != nil {
				continue
			}
			seen[root] = true
			stale := &node{cgroupRoot: root}
			err = errors.Join(stale.killLeftovers(), stale.removeCgroups())
			fmt.Printf("kubelettest: removed the node a killed run left (%s): %v\n", root, err)
		}
	}
}

// startHolder starts the process that holds the node's namespaces, after it
// has made the node's private mounts (tmpfs over the directories the runtime
// and the kubelet write, copies over the sysctls) and its network.
func (n *node) startHolder() error {
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, d := range []string{"/run", "/var/lib", "/var/log"} {
		fmt.Fprintf(&script, "mount -t tmpfs -o mode=0755 tmpfs %s\n", d)
	}
	for _, s := range maskedSysctls {
		copy := filepath.Join(n.dir, "sysctl", strings.ReplaceAll(s, "/", "."))
		fmt.Fprintf(&script, "cat /proc/sys/%[1]s > %[2]s\nmount --bind %[2]s /proc/sys/%[1]s\n", s, copy)
	}
	fmt.Fprintf(&script, "ip link set lo up\nip addr add %s/32 dev lo\n", nodeIP)
	fmt.Fprintf(&script, "touch %s\nexec sleep infinity\n", filepath.Join(n.dir, "holder.ready"))
	log, err := os.Create(filepath.Join(n.dir, "holder.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	n.holder = exec.Command("unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", script.String())
	n.holder.Stdout, n.holder.Stderr = log, log
	n.holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.holder.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- n.holder.Wait() }()
	deadline := time.After(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(n.dir, "holder.ready")); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the namespace holder exited: %v", err)
		case <-deadline:
			return errors.New("the namespace holder is not ready after 10s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startRegistry starts the CNCF distribution registry (bin) at
// registryAddr in the node's network namespace, its storage the directory
// storage, and waits until it answers. Plain HTTP: containerd reaches it by
// its hosts.toml (writeConfigs), helm and cosign with their insecure flags.
func (n *node) startRegistry(bin, storage string) error {
	config := filepath.Join(n.dir, "registry.yml")
	err := os.WriteFile(config, fmt.Appendf(nil, `version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: %s}}
http: {addr: %s}
`, storage, registryAddr), 0o644)
	if err != nil {
		return err
	}
	// The registry exports traces to localhost:4318 unless told not to.
	n.registry, err = n.daemon("registry", "/usr/bin/env", "OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true", bin, "serve", config)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: n.netns().Dial}}
	if err := proctest.Poll(30*time.Second, func() error {
		resp, err := client.Get("http://" + registryAddr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/v2/: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("the node's registry does not answer: %w", err)
	}
	return nil
}

// daemon starts a program in the node's namespaces, its output in
// name.log.
func (n *node) daemon(name string, argv ...string) (*exec.Cmd, error) {
	log, err := os.Create(filepath.Join(n.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := n.nsenter(context.Background(), argv...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go cmd.Wait() //nolint:errcheck // reaped; stop polls /proc
	// Before it starts a container, and so a shim.
	return cmd, n.adopt(cmd.Process.Pid)
}

// nsenter is argv run in the node's namespaces.
func (n *node) nsenter(ctx context.Context, argv ...string) *exec.Cmd {
	args := proctest.Nsenter(n.holder.Process.Pid, []string{"mount", "net"}, argv...)
	return exec.CommandContext(ctx, args[0], args[1:]...)
}

// ctr runs ctr against the node's containerd, in the k8s.io namespace.
func (n *node) ctr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := n.nsenter(ctx, append([]string{"ctr", "--address", criSocket, "-n", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// netns is the node's network namespace.
func (n *node) netns() proctest.Netns { return proctest.NetnsOf(n.holder.Process.Pid) }

// pods is the kubelet's own view of its pods.
func (n *node) pods() ([]corev1.Pod, error) {
	resp, err := n.client.Get("https://127.0.0.1:10250/pods")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/pods: %s", resp.Status)
	}
	var list corev1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("/pods: %w", err)
	}
	return list.Items, nil
}

// stop tears the node down, whatever state it is in: pods, kubelet,
// containers, containerd and its shims, the namespaces (and with them every
// mount), the cgroups, the directory.
func (n *node) stop() error {
	var errs []error
	if n.holder != nil && n.holder.Process != nil {
		if n.cluster != nil {
			errs = append(errs, n.stopControllers())
		}
		if n.kubelet != nil {
			n.removeAllPods()
			errs = append(errs, stopProcess(n.kubelet, 10*time.Second))
		}
		if n.registry != nil {
			errs = append(errs, stopProcess(n.registry, 10*time.Second))
		}
		if n.containerd != nil {
			if out, err := n.ctr("tasks", "ls", "-q"); err == nil {
				for _, id := range strings.Fields(out) {
					n.ctr("tasks", "kill", "-s", "SIGKILL", id) //nolint:errcheck // best effort; the cgroup sweep follows
				}
			}
			errs = append(errs, stopProcess(n.containerd, 10*time.Second))
		}
		if n.cluster != nil {
			errs = append(errs, n.stopAPIServer())
		}
		errs = append(errs, n.killLeftovers())
		n.holder.Process.Kill() //nolint:errcheck // may be gone
		n.holder.Process.Wait() //nolint:errcheck
	}
	errs = append(errs, n.removeCgroups())
	if os.Getenv("KUBELETTEST_KEEP") == "" {
		errs = append(errs, os.RemoveAll(n.dir))
	}
	return errors.Join(errs...)
}

// removeAllPods deletes every static pod and waits (bounded) for the
// runtime to have no running container.
func (n *node) removeAllPods() {
	entries, _ := os.ReadDir(n.manifests())
	for _, e := range entries {
		os.Remove(filepath.Join(n.manifests(), e.Name()))
	}
	proctest.Poll(60*time.Second, func() error { //nolint:errcheck // the kill sweep follows
		out, err := n.ctr("tasks", "ls")
		if err != nil {
			return nil
		}
		if strings.Contains(out, "RUNNING") {
			return errors.New("containers still running")
		}
		return nil
	})
}

// killLeftovers kills every process left in the node's cgroups: the shims,
// the containers, the holder (and through it, the namespaces).
func (n *node) killLeftovers() error {
	for range 5 {
		pids := n.cgroupPids()
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL) //nolint:errcheck // may be gone
		}
		time.Sleep(200 * time.Millisecond) // the kernel's own; cgroupPids checks
	}
	if pids := n.cgroupPids(); len(pids) > 0 {
		return fmt.Errorf("processes left in %s: %v", n.cgroupRoot, pids)
	}
	return nil
}

func (n *node) cgroupPids() []int {
	var pids []int
	for _, h := range cgroupHierarchies() {
		filepath.WalkDir(filepath.Join(h, n.cgroupRoot), func(path string, d os.DirEntry, err error) error { //nolint:errcheck
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroups removes the cgroup root's tree, leaves first.
func (n *node) removeCgroups() error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, n.cgroupRoot)
		var dirs []string
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error { //nolint:errcheck
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			err := proctest.Poll(5*time.Second, func() error {
				if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
					return err
				}
				return nil
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// stopProcess ends a daemon with SIGTERM, then SIGKILL after grace.
func stopProcess(cmd *exec.Cmd, grace time.Duration) error {
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // may be gone
	if proctest.Poll(grace, func() error { return alive(cmd.Process.Pid) }) == nil {
		return nil
	}
	cmd.Process.Kill() //nolint:errcheck
	return proctest.Poll(grace, func() error { return alive(cmd.Process.Pid) })
}

// alive is nil once pid is gone (or a zombie of ours not yet reaped).
func alive(pid int) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	if i := bytes.LastIndexByte(data, ')'); i > 0 && len(data) > i+2 && data[i+2] == 'Z' {
		return nil
	}
	return fmt.Errorf("pid %d still running", pid)
}

// logTails is the end of each daemon's log, for a failure's message. A
// log grows for as long as the suite runs (the kubelet's at -v 3): only
// its first and last MiB are read.
func (n *node) logTails() error {
	var b strings.Builder
	for _, name := range []string{"holder", "etcd", "kube-apiserver", "containerd", "kubelet", "kube-controller-manager", "kube-scheduler"} {
		data, err := proctest.ReadFile(filepath.Join(n.dir, name+".log"))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(data), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- %s.log (end)\n%s\n", name, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return nil
	}
	return errors.New(b.String())
}
