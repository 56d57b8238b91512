package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeProc writes a /proc of processes: pid → (ppid, starttime in ticks,
// NSpid entries); "self" is a copy of self's.
func fakeProc(t *testing.T, self int, procs map[int][3]any) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// A comm with spaces and a ')' of its own, as a process may name
		// itself.
		stat := fmt.Sprintf("%d (sh) x) S %d 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 2000 300\n", pid, p[0], p[1])
		status := fmt.Sprintf("Name:\tsh\nPid:\t%d\nNSpid:\t%s\n", pid, p[2])
		for name, b := range map[string]string{"stat": stat, "status": status} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(fmt.Sprint(self), filepath.Join(root, "self")); err != nil {
		t.Fatal(err)
	}
	return root
}

const tick = time.Second / clockTicks

// bootTicks is now on the boot clock, in /proc's ticks, and the wall clock
// at the start of that tick.
func bootTicks(t *testing.T) (uint64, time.Time) {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	wall := time.Now()
	return uint64(ts.Nano() / int64(tick)), wall.Add(-time.Duration(ts.Nano() % int64(tick)))
}

// The container's start is its first process's: the walk up stops at a
// parent /proc does not show (ppid 0) or one in an outer PID namespace
// (fewer NSpid entries).
func TestContainerStarted(t *testing.T) {
	now, at := bootTicks(t)
	tests := []struct {
		name  string
		self  int
		procs map[int][3]any
		ago   uint64 // ticks before now that the answer's process started
	}{
		{"PID 1 of the container's /proc", 7, map[int][3]any{
			7: {3, now - 10, "7"},
			3: {1, now - 500, "3"},
			1: {0, now - 900, "1"},
		}, 900},
		{"a pod that shares its PID namespace: the container's first process", 40, map[int][3]any{
			40: {12, now - 20, "40"},
			12: {0, now - 300, "12"}, // its parent, the shim, is not shown
		}, 300},
		{"a /proc of an outer namespace", 5003, map[int][3]any{
			5003: {5001, now - 5, "5003 9"},
			5001: {5000, now - 200, "5001 1"},
			5000: {1, now - 7000, "5000"}, // outside: the runtime's
			1:    {0, now - 90000, "1"},
		}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := containerStarted(fakeProc(t, tt.self, tt.procs))
			if err != nil {
				t.Fatal(err)
			}
			want := at.Add(-time.Duration(tt.ago) * tick)
			if d := got.Sub(want); d < -tick || d > tick {
				t.Errorf("started %v, want %v (%d ticks ago) within a tick", got, want, tt.ago)
			}
		})
	}
	if _, err := containerStarted(t.TempDir()); err == nil {
		t.Error("no /proc: no error")
	}
	if got := ContainerStarted(); got.IsZero() || got.After(time.Now()) {
		t.Errorf("this process's container started %v", got)
	}
}

// A record counts for a pod's next run when its writer's container started
// after the trigger that ended the run before; otherwise, and without a
// start, it is the earlier run's.
func TestEarlierRun(t *testing.T) {
	trigger := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		r    Record
		want bool
	}{
		{Record{Name: "job", ExitCode: 0, Started: trigger.Add(time.Second)}, false},
		{Record{Name: "job", ExitCode: 0, Started: trigger}, true},
		{Record{Name: "job", ExitCode: 143, Reason: Signaled, Started: trigger.Add(-time.Minute)}, true},
		{Record{Name: "job", ExitCode: 0}, true}, // a client that could not tell
		{Record{Name: "job", ExitCode: LostCode, Reason: Lost, Started: trigger.Add(time.Second)}, false},
		{Record{Name: "job", Running: true}, false},
	} {
		if got := EarlierRun(tt.r, trigger); got != tt.want {
			t.Errorf("EarlierRun(%+v) = %v, want %v", tt.r, got, tt.want)
		}
	}
}
