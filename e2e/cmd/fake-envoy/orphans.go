package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// The hidden modes the binary re-executes itself in: cheap processes, no shell.
const (
	orphanParentMode = "__fake-envoy-orphan-parent"
	orphanMode       = "__fake-envoy-orphan"
)

// spawnOrphans forks an intermediate child that starts n grandchildren and exits at
// once without waiting for them. They are orphaned to PID 1 or to the nearest
// subreaper, the supervisor's reaper, like the helpers a real proxy's scripts leave.
// The intermediate itself is reaped here, as its parent.
func spawnOrphans(n int, life time.Duration) error {
	cmd := reexec(orphanParentMode, strconv.Itoa(n), life.String())
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start orphan parent: %w", err)
	}
	go cmd.Wait()
	return nil
}

// reexec runs this very binary in a hidden mode, whatever its path, under the name it
// was started with so that ps shows what it is.
func reexec(args ...string) *exec.Cmd {
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = os.Args[0]
	return cmd
}

// orphanParent is the intermediate child.
func orphanParent(args []string) int {
	if len(args) != 2 {
		return 2
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return 2
	}
	for range n {
		if err := reexec(orphanMode, args[1]).Start(); err != nil {
			return 1
		}
	}
	return 0
}

// orphan is a grandchild: it lives its life and exits.
func orphan(args []string) int {
	if len(args) != 1 {
		return 2
	}
	life, err := time.ParseDuration(args[0])
	if err != nil {
		return 2
	}
	time.Sleep(life)
	return 0
}
