package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Once the proxy is stopping, the records directory is no longer watched:
// the kernel destroys an inotify watch after an SRCU grace period of
// fsnotify (8 to 16 ms on a 2-core VM, over 100 ms under load), and when
// the descriptor's close is what removes it, the supervisor's exit waits
// for that close. Removed at the stop, it is destroyed while the proxy
// stops. The fake Envoy here acknowledges /quitquitquit but never exits,
// so that the stop lasts until the SIGKILL at StopTimeout.
func TestStopUnwatchesTheRecords(t *testing.T) {
	h := startSupervisor(t, nil, "--hang-on-term")
	h.waitReady()
	if n := inotifyWatches(t); n != 1 {
		t.Fatalf("%d inotify watches while ready, want the records directory's", n)
	}
	h.complete("app", 0, "")
	h.eventually("stopping", func() bool { return h.status().State == "stopping" })
	h.eventually("no watch left while the proxy stops", func() bool {
		return h.status().State == "stopping" && inotifyWatches(t) == 0
	})
	if code := h.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
}

// inotifyWatches counts the inotify watches of this process's descriptors,
// from their fdinfo.
func inotifyWatches(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err != nil || target != "anon_inode:inotify" {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err != nil {
			continue // closed since
		}
		n += strings.Count(string(info), "inotify wd:")
	}
	return n
}
