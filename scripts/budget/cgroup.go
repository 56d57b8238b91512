package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroup is the memory cgroup a test binary runs in: under cgroup v1 a
// directory of the memory hierarchy, under v2 one of the unified
// hierarchy with the memory controller. It is made inside the cgroup of
// this process when it can be, so that whatever limit holds this process
// (a CI runner's, a session's) holds the test binary too.
type cgroup struct {
	dir string
	v2  bool
}

// hierarchy is where the memory controller is mounted and this process's
// cgroup in it.
type hierarchy struct {
	mount string // the hierarchy's root directory, as mounted
	self  string // this process's cgroup directory in it
	v2    bool
}

// memoryHierarchy finds the memory controller: a v1 hierarchy of its own
// (also on a hybrid layout, where the unified hierarchy has no
// controllers), else the unified hierarchy when it offers memory.
func memoryHierarchy() (hierarchy, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return hierarchy{}, err
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return hierarchy{}, err
	}
	var v1Path, v2Path string
	hasV1Path, hasV2Path := false, false
	for _, line := range strings.Split(string(own), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2Path, hasV2Path = f[2], true
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				v1Path, hasV1Path = f[2], true
			}
		}
	}
	var v1, v2 *hierarchy
	for _, line := range strings.Split(string(mounts), "\n") {
		left, right, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 {
			continue
		}
		root, mount := lf[3], unescape(lf[4])
		switch {
		case rf[0] == "cgroup" && hasV1Path && hasOpt(rf[2], "memory") && v1 == nil:
			v1 = &hierarchy{mount: mount, self: within(mount, root, v1Path)}
		case rf[0] == "cgroup2" && hasV2Path && v2 == nil:
			v2 = &hierarchy{mount: mount, self: within(mount, root, v2Path), v2: true}
		}
	}
	switch {
	case v1 != nil:
		return *v1, nil
	case v2 != nil:
		if c, _ := os.ReadFile(filepath.Join(v2.mount, "cgroup.controllers")); hasWord(string(c), "memory") {
			return *v2, nil
		}
		return hierarchy{}, errors.New("no memory controller: no cgroup v1 memory hierarchy, and the unified hierarchy (cgroup v2) offers none")
	}
	return hierarchy{}, errors.New("no cgroup hierarchy with the memory controller is mounted")
}

// within is the directory of a cgroup path in a hierarchy mounted at mount
// from root (not "/" inside a container that sees part of the tree).
func within(mount, root, path string) string {
	if root != "/" {
		path = strings.TrimPrefix(path, root)
	}
	return filepath.Join(mount, path)
}

func unescape(s string) string { // mountinfo writes space, tab, \n and \ as octal escapes
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func hasOpt(opts, opt string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// makeCgroup makes the cgroup named name with a hard limit (0: none):
// inside this process's own cgroup, else (v2, when this process's cgroup
// cannot have children with the memory controller because it holds
// processes) at the hierarchy's root. Before it, it removes what a
// killed run left beside it.
func makeCgroup(h hierarchy, name string, limit int64) (*cgroup, error) {
	parents := []string{h.self}
	if h.mount != h.self {
		parents = append(parents, h.mount)
	}
	var errs []error
	for _, p := range parents {
		if h.v2 {
			if err := enableMemory(p, p == h.mount); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		sweep(p, h.v2)
		cg := &cgroup{dir: filepath.Join(p, name), v2: h.v2}
		if err := os.Mkdir(cg.dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := cg.setLimit(limit); err != nil {
			cg.remove() //nolint:errcheck // it has no process yet
			errs = append(errs, err)
			continue
		}
		return cg, nil
	}
	return nil, errors.Join(errs...)
}

// enableMemory makes sure the children of the v2 cgroup dir get the memory
// controller. A cgroup other than the root cannot give it while it holds
// processes itself.
func enableMemory(dir string, root bool) error {
	sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	if hasWord(string(sub), "memory") {
		return nil
	}
	if !root {
		if procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(strings.TrimSpace(string(procs))) > 0 {
			return fmt.Errorf("%s holds processes, so its children cannot have the memory controller", dir)
		}
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory")
}

func (c *cgroup) setLimit(limit int64) error {
	if limit <= 0 {
		return nil
	}
	file := "memory.limit_in_bytes"
	if c.v2 {
		file = "memory.max"
	}
	return writeFile(filepath.Join(c.dir, file), strconv.FormatInt(limit, 10))
}

func (c *cgroup) procsFile() string { return filepath.Join(c.dir, "cgroup.procs") }

// memory is what the cgroup's processes hold that the kernel cannot take
// back by dropping the file cache: the cgroup's charge less its file pages
// (active and inactive: the page cache of what its processes read and
// wrote), plus what it has in swap. Anonymous memory, tmpfs and shared
// memory, and the kernel's memory for the processes (page tables,
// sockets) count.
func (c *cgroup) memory() (int64, error) {
	usageFile, prefix, swapFile := "memory.usage_in_bytes", "total_", ""
	if c.v2 {
		usageFile, prefix, swapFile = "memory.current", "", "memory.swap.current"
	}
	usage, err := readInt(filepath.Join(c.dir, usageFile))
	if err != nil {
		return 0, err
	}
	stat, err := readStat(filepath.Join(c.dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	n := usage - stat[prefix+"active_file"] - stat[prefix+"inactive_file"]
	if c.v2 {
		swap, _ := readInt(filepath.Join(c.dir, swapFile))
		n += swap
	} else {
		n += stat["total_swap"]
	}
	return max(n, 0), nil
}

// ooms is how many processes of the cgroup the kernel's OOM killer has
// killed at its hard limit.
func (c *cgroup) ooms() int64 {
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	stat, _ := readStat(filepath.Join(c.dir, file))
	return stat["oom_kill"]
}

// pids are the processes in the cgroup and in the cgroups below it.
func (c *cgroup) pids() []int {
	var pids []int
	for _, d := range c.dirs() {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// dirs are the cgroup's directory and those below it, the deepest first.
func (c *cgroup) dirs() []string {
	var dirs []string
	filepath.WalkDir(c.dir, func(path string, d os.DirEntry, err error) error { //nolint:errcheck // a cgroup gone is none
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// kill kills every process left in the cgroup and those below it, until
// none is left (a process may fork while the others die), for up to 5 s.
func (c *cgroup) kill() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := c.pids()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left in %s: %v", c.dir, pids)
		}
		if c.v2 && writeFile(filepath.Join(c.dir, "cgroup.kill"), "1") == nil {
			// Every process of the subtree, at once.
		} else {
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // gone already is fine
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// remove removes the cgroup and those below it, leaves first; a cgroup
// whose last process is still exiting refuses for a moment.
func (c *cgroup) remove() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		for _, d := range c.dirs() {
			if e := syscall.Rmdir(d); e != nil && !errors.Is(e, syscall.ENOENT) {
				err = fmt.Errorf("remove the cgroup %s: %w", d, e)
			}
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sweep kills and removes the cgroups a killed run of this program left in
// parent: those named after a process that is gone (or after this one: a
// run that had its pid before).
func sweep(parent string, v2 bool) {
	dirs, _ := filepath.Glob(filepath.Join(parent, namePrefix+"*"))
	for _, d := range dirs {
		if pid, ok := ownerPid(filepath.Base(d)); ok && (pid == os.Getpid() || !alive(pid)) {
			c := &cgroup{dir: d, v2: v2}
			c.kill()   //nolint:errcheck // best effort: the next run tries again
			c.remove() //nolint:errcheck
		}
	}
}

// namePrefix names this program's cgroups and directories, followed by
// the pid of the run that made them.
const namePrefix = "budget-"

func ownerPid(name string) (int, bool) {
	pid, err := strconv.Atoi(strings.TrimPrefix(name, namePrefix))
	return pid, err == nil && strings.HasPrefix(name, namePrefix) && pid > 0
}

func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	return errors.Join(err, f.Close())
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readStat reads a file of "key value" lines (memory.stat, memory.events).
func readStat(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	stat := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			stat[k] = n
		}
	}
	return stat, sc.Err()
}
