package kubelettest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
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
// so a deletion's exit codes are read here, before the kubelet removes the
// container (waitExits).
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
// and returns their statuses. Every container not yet seen finished is read
// on every round, and one seen finished is not read again: the kubelet
// removes a deleted pod's container on the runtime's word of its death
// (its PLEG's relist, about a second), so one that exits first (the app,
// before a native sidecar's drain) is there to read for about that long.
// A round that stopped at the first container still running left the
// others unread, on a busy node past that second, and the test failed on a
// status file that was gone.
func (n *node) waitExits(t *testing.T, ids map[string]string, timeout time.Duration) map[string]criStatus {
	t.Helper()
	got := map[string]criStatus{}
	err := proctest.Poll(timeout, func() error {
		var first error
		for name, id := range ids {
			if _, seen := got[name]; seen {
				continue
			}
			s, err := n.criStatus(id)
			switch {
			case err != nil:
				err = fmt.Errorf("container %s: %w", name, err)
			case s.FinishedAt == 0:
				err = fmt.Errorf("container %s still running", name)
			default:
				got[name] = s
			}
			if first == nil {
				first = err
			}
		}
		return first
	})
	if err != nil {
		t.Fatalf("after %s: %v", timeout, err)
	}
	return got
}

// events are the kubelet's events about a pod, from its log: without an
// API server it logs them (at -v 3) and records nothing else. The log is
// the whole suite's, and it logs every event it makes, unlike the API's
// (the recorder's spam filter comes after its log): a pod that crash-loops
// logs a back-off every sync. So the log is read a line at a time, a line
// is cut at maxEventLine, and past maxEvents the events are only counted,
// in a last line that says how many were cut.
func (n *node) events(t *testing.T, pod string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(n.dir, "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []string
	cut := 0
	err = eachLine(f, maxEventLine, func(line string) {
		if !strings.Contains(line, "Event occurred") || !strings.Contains(line, pod+"-"+nodeName) {
			return
		}
		if len(evs) == maxEvents {
			cut++
			return
		}
		evs = append(evs, line)
	})
	if err != nil {
		t.Fatalf("the kubelet's log: %v", err)
	}
	if cut > 0 {
		evs = append(evs, fmt.Sprintf("[kubelettest: %d more events of pod %s cut]", cut, pod))
	}
	return evs
}

// Bounds on events: a pod's run logs tens, each a line of hundreds of
// bytes.
const (
	maxEvents    = 2000
	maxEventLine = 4 << 10
)

// eachLine calls fn with each line of r, without its newline, cut to most
// bytes: a line longer than that is never held whole.
func eachLine(r io.Reader, most int, fn func(line string)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if room := most - len(line); room > 0 {
			line = append(line, frag[:min(room, len(frag))]...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue // the line goes on
		case err != nil && err != io.EOF:
			return err
		}
		if len(line) > 0 || err == nil {
			fn(strings.TrimSuffix(string(line), "\n"))
		}
		if err == io.EOF {
			return nil
		}
		line = line[:0]
	}
}
