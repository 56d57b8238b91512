package kubelettest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// criStatus is the status containerd's CRI plugin keeps of a container, in
// a file of its own. A deleted static pod leaves the kubelet's API at once,
// so a deletion's exit codes are read here, before the kubelet's garbage
// collection removes the container (a minute later at the earliest).
type criStatus struct {
	StartedAt  int64 // Unix ns
	FinishedAt int64 // Unix ns; 0 while it runs
	ExitCode   int32
	Reason     string
}

func (s criStatus) started() time.Time  { return time.Unix(0, s.StartedAt) }
func (s criStatus) finished() time.Time { return time.Unix(0, s.FinishedAt) }

// containerIDs maps each container of the pod to its runtime ID.
func containerIDs(t *testing.T, p *corev1.Pod) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, s := range statuses(p) {
		_, id, ok := strings.Cut(s.ContainerID, "://")
		if !ok {
			t.Fatalf("pod %s: container %s has no ID:\n%s", p.Name, s.Name, describe(p))
		}
		ids[s.Name] = id
	}
	return ids
}

// criStatus reads a container's status, seen through the holder's root (the
// file is in the node's mount namespace).
func (n *node) criStatus(id string) (criStatus, error) {
	var s criStatus
	path := filepath.Join(fmt.Sprintf("/proc/%d/root", n.holder.Process.Pid),
		"/var/lib/containerd/io.containerd.grpc.v1.cri/containers", id, "status")
	data, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

// waitExits waits up to timeout for each named container to have finished,
// and returns their statuses. A container seen finished is not read again:
// the kubelet removes a deleted pod's containers once the last has exited
// (its container GC, every minute), and one that exited first may be gone
// by the time the last exits.
func (n *node) waitExits(t *testing.T, ids map[string]string, timeout time.Duration) map[string]criStatus {
	t.Helper()
	got := map[string]criStatus{}
	err := proctest.Poll(timeout, func() error {
		for name, id := range ids {
			if _, seen := got[name]; seen {
				continue
			}
			s, err := n.criStatus(id)
			if err != nil {
				return err
			}
			if s.FinishedAt == 0 {
				return fmt.Errorf("container %s still running", name)
			}
			got[name] = s
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after %s: %v", timeout, err)
	}
	return got
}

// events are the kubelet's events about a pod, from its log: without an
// API server it logs them (at -v 3) and records nothing else.
func (n *node) events(t *testing.T, pod string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.dir, "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	var evs []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "Event occurred") && strings.Contains(line, pod+"-"+nodeName) {
			evs = append(evs, line)
		}
	}
	return evs
}
