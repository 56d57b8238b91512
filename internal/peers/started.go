package peers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ContainerStarted is when the container of this process started, as the
// kernel dates it, or zero when it cannot tell. Clients put it in their
// records (Record.Started), so that the supervisor of a pod's next run
// after a RestartAllContainers can tell the records of that run, written
// before it started, from those of the run before (EarlierRun).
//
// The container's start is that of this process's oldest ancestor in its
// own PID namespace: the container's PID 1, or its first process when the
// pod shares its PID namespace. The walk up stops at a parent that the
// process's /proc does not show (getppid 0: the runtime's shim, outside
// the namespace) or that lies in an outer namespace (fewer entries in its
// NSpid: a /proc of an outer namespace, as where a test runs the process
// in a namespace of its own). That ancestor's kernel start time
// (/proc/PID/stat, in clock ticks since boot) is taken to the wall clock
// through the boot clock, to within a tick (10 ms), never later than the
// start. A process whose ancestry cannot be read (/proc hidden or missing,
// a chain too long) says zero, which reads as a record of an earlier run:
// what the records said before they carried it.
func ContainerStarted() time.Time {
	t, err := containerStarted("/proc")
	if err != nil {
		return time.Time{}
	}
	return t
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// architecture Linux builds for (the kernel's ABI, whatever its HZ).
const clockTicks = 100

// maxAncestors bounds the walk up the ancestry.
const maxAncestors = 256

func containerStarted(proc string) (time.Time, error) {
	depth, err := nsDepth(proc, "self")
	if err != nil {
		return time.Time{}, err
	}
	pid := "self"
	for range maxAncestors {
		ppid, start, err := procStat(proc, pid)
		if err != nil {
			return time.Time{}, err
		}
		if ppid != 0 {
			parent := strconv.Itoa(ppid)
			d, err := nsDepth(proc, parent)
			if err != nil {
				return time.Time{}, err
			}
			if d >= depth {
				pid = parent
				continue
			}
		}
		var boot unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
			return time.Time{}, fmt.Errorf("boot clock: %w", err)
		}
		now := time.Now()
		since := time.Duration(boot.Nano()) - time.Duration(start)*(time.Second/clockTicks)
		if since < 0 {
			return time.Time{}, errors.New("the container starts after now")
		}
		return now.Add(-since).Round(0).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("more than %d ancestors", maxAncestors)
}

// nsDepth is how many PID namespaces, from that of proc down, a process is
// in: the entries of its NSpid (Linux 4.1 and later; 1 without it). A
// process's ancestors are in its namespace or in outer ones, and one with
// as many entries is in its own.
func nsDepth(proc, pid string) (int, error) {
	b, err := os.ReadFile(proc + "/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("NSpid:")); ok {
			return len(bytes.Fields(rest)), nil
		}
	}
	return 1, nil
}

// procStat reads a process's parent and start time (clock ticks since
// boot) from <proc>/<pid>/stat.
func procStat(proc, pid string) (ppid int, start uint64, err error) {
	b, err := os.ReadFile(proc + "/" + pid + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses, so
	// the fields are counted from its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("%s/%s/stat: no command", proc, pid)
	}
	f := bytes.Fields(b[i+1:])
	// Fields 4 (ppid) and 22 (starttime), counted from 1 at pid; f[0] is 3.
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("%s/%s/stat: %d fields", proc, pid, len(f)+2)
	}
	if ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return 0, 0, fmt.Errorf("%s/%s/stat: ppid: %w", proc, pid, err)
	}
	if start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%s/%s/stat: starttime: %w", proc, pid, err)
	}
	return ppid, start, nil
}
