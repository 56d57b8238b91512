// Command budget runs a test binary within a budget of memory and disk, as
// go test's -exec:
//
//	go test -json -exec "bin/budget -memory 4GiB -disk 2GiB -name BUDGET_E2E" ./...
//
// The binary and every process it starts run in a memory cgroup of their
// own, with a hard limit a little above the budget, and with TMPDIR a fresh
// directory of their own (so t.TempDir's and os.MkdirTemp's files are
// counted). Every 100 ms budget reads what the cgroup holds that the kernel
// cannot take back by dropping the file cache (anonymous memory, tmpfs and
// shared memory, the kernel's memory for its processes, swap), and every
// half second or so the size of the files under that TMPDIR. When one
// passes its budget, or the kernel's OOM killer kills one of the cgroup's
// processes at the hard limit, budget stops the binary with SIGQUIT (its
// goroutines' stacks go to the output) and fails the tests that were
// running: it ends the binary's output with a report of each,
//
//	--- FAIL: TestX (12.34s)
//	    budget: memory 4.1GiB over the budget of 4GiB (BUDGET_E2E) ...
//
// which go test -json (cmd/test2json) reads as that test's failure (the
// running tests are followed through the framing lines, === RUN and the
// like, that go test -json and -v make the binary print; the output passes
// through byte for byte). Whatever happens, budget then kills what is left
// in the cgroup and removes it and the directory, and it ends the output
// with the binary's peaks:
//
//	budget: peak memory 812.4MiB of 4GiB, disk 12.0MiB of 2GiB
//
// which scripts/test-summary folds into the package's line. It exits with
// the binary's code, 1 after an overrun.
//
// Without a memory cgroup (no root, or no memory controller) it runs the
// binary as it is, after a line that says the budget is not enforced, and
// under CI=true it fails instead.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/scripts/internal/budgetline"
)

// joinArg, as budget's first argument, makes it the binary's first
// process: it joins the cgroup, then execs the binary, so that nothing of
// the binary runs outside it.
const joinArg = "-budget-join-cgroup"

func main() {
	if len(os.Args) > 3 && os.Args[1] == joinArg {
		join(os.Args[2], os.Args[3:])
	}
	os.Exit(run(os.Args[1:], os.Stdout))
}

type config struct {
	memory, limit, disk int64
	name                string // what sets the budget, for the messages
	sample              time.Duration
	stopWait            time.Duration // from SIGQUIT to SIGKILL
}

func run(args []string, out *os.File) int {
	fs := flag.NewFlagSet("budget", flag.ContinueOnError)
	memory := fs.String("memory", "0", "the memory `budget` of the test binary and its processes (KiB, MiB, GiB); 0: none")
	limit := fs.String("memory-limit", "", "the cgroup's hard `limit` (default: the budget plus a quarter, at least 256MiB more)")
	disk := fs.String("disk", "0", "the disk `budget` of the files under the binary's TMPDIR; 0: none")
	name := fs.String("name", "", "what sets the budgets, for the messages (the Makefile's variable)")
	sample := fs.Duration("sample", 100*time.Millisecond, "how often the memory is read")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: budget [flags] BINARY [ARGS...]   (go test -exec \"budget [flags]\")")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cfg := config{name: *name, sample: *sample, stopWait: 10 * time.Second}
	var err error
	if cfg.memory, err = budgetline.ParseSize(*memory); err == nil {
		cfg.disk, err = budgetline.ParseSize(*disk)
	}
	if err == nil && *limit != "" {
		cfg.limit, err = budgetline.ParseSize(*limit)
	} else if cfg.memory > 0 {
		cfg.limit = cfg.memory + max(cfg.memory/4, 256<<20)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "budget:", err)
		return 2
	}
	r := &runner{cfg: cfg, out: out, argv: fs.Args(), tests: newTracker()}
	return r.run()
}

type runner struct {
	cfg   config
	out   *os.File
	argv  []string // the test binary and its arguments
	tests *tracker
	cg    *cgroup
	tmp   string

	mu       sync.Mutex
	peakMem  int64
	peakDisk int64
	ooms     int64 // the cgroup's OOM kills so far
	over     *overrun
	proc     *os.Process
	exited   chan struct{}
}

// overrun is the first budget the binary passed.
type overrun struct {
	what            string // the figure and the budget
	detail          string // what held it
	leaves, parents []testRun
	stopped         bool // budget stopped the binary (else it was dead already)
}

func (r *runner) run() int {
	h, err := memoryHierarchy()
	name := namePrefix + strconv.Itoa(os.Getpid())
	if err == nil {
		r.cg, err = makeCgroup(h, name, r.cfg.limit)
	}
	if err != nil {
		return r.unenforced(fmt.Sprintf("no memory cgroup for the test binary (%v)", err))
	}
	defer func() {
		if err := r.cg.kill(); err != nil {
			fmt.Fprintln(r.out, budgetline.Prefix+err.Error())
		}
		if err := r.cg.remove(); err != nil {
			fmt.Fprintln(r.out, budgetline.Prefix+err.Error())
		}
	}()
	sweepDirs()
	record := filepath.Join(os.TempDir(), "."+name)
	if r.tmp, err = makeTmp(record); err != nil {
		fmt.Fprintln(r.out, budgetline.Prefix+"TMPDIR:", err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(r.tmp); err != nil {
			fmt.Fprintln(r.out, budgetline.Prefix+"remove the TMPDIR:", err)
		}
		os.Remove(record) //nolint:errcheck // what is left of it is swept
	}()
	return r.supervise()
}

// makeTmp makes the binary's TMPDIR, and record, which names it for
// sweepDirs. Its path is as short as can be: /tmp/bXXX, 5 bytes longer
// than /tmp. A unix socket's path must fit in 107 bytes, and the tests'
// longest under a t.TempDir() in /tmp takes 100 (t.TempDir() is named
// after the test, to 64 bytes, and a random number).
func makeTmp(record string) (string, error) {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	for range 1000 {
		name := []byte("b___")
		for i := 1; i < len(name); i++ {
			name[i] = digits[rand.IntN(len(digits))]
		}
		dir := filepath.Join(os.TempDir(), string(name))
		if err := os.WriteFile(record, []byte(dir), 0o644); err != nil {
			return "", err
		}
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err == nil {
			// As /tmp: the tests run processes as other users too.
			err = os.Chmod(dir, 0o777|os.ModeSticky)
		}
		return dir, err
	}
	return "", errors.New("no free name for it in " + os.TempDir())
}

// unenforced runs the binary as it is, or under CI=true fails.
func (r *runner) unenforced(why string) int {
	if os.Getenv("CI") == "true" {
		fmt.Fprintf(r.out, "%scannot enforce the budget, and CI=true: %s\n", budgetline.Prefix, why)
		return 1
	}
	fmt.Fprintf(r.out, "%snot enforced: %s\n", budgetline.Prefix, why)
	path, err := exec.LookPath(r.argv[0])
	if err == nil {
		err = syscall.Exec(path, r.argv, os.Environ())
	}
	fmt.Fprintln(r.out, budgetline.Prefix+err.Error())
	return 1
}

func (r *runner) supervise() int {
	pr, pw, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(r.out, budgetline.Prefix+err.Error())
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(r.out, budgetline.Prefix+err.Error())
		return 1
	}
	cmd := exec.Command(self, append([]string{joinArg, r.cg.procsFile()}, r.argv...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+r.tmp)
	// One pipe for both, as go test gives the binary: its writes to the two
	// stay in order.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, pw, pw
	r.ooms = r.cg.ooms()
	// Signals for the binary (go test's SIGQUIT at its timeout, a ^C) go to
	// it; this process stays to clean up. SIGPIPE: a closed output ends no
	// cleanup.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGPIPE)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		fmt.Fprintln(r.out, budgetline.Prefix+err.Error())
		return 1
	}
	pw.Close()
	r.mu.Lock()
	r.proc, r.exited = cmd.Process, make(chan struct{})
	r.mu.Unlock()
	go func() {
		for s := range sigs {
			if s != syscall.SIGPIPE {
				cmd.Process.Signal(s) //nolint:errcheck // gone is fine
			}
		}
	}()

	relayed := make(chan byte)
	go r.relay(pr, relayed)
	stopMonitor := make(chan struct{})
	monitored := make(chan struct{})
	go r.monitor(stopMonitor, monitored)

	err = cmd.Wait()
	close(r.exited)
	close(stopMonitor)
	<-monitored
	r.sampleMemory() // a last look: an OOM kill that ended the binary
	// What the binary left: its processes, then their output.
	if err := r.cg.kill(); err != nil {
		fmt.Fprintln(r.out, budgetline.Prefix+err.Error())
	}
	pr.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // a process outside the cgroup may hold the pipe
	last := <-relayed
	pr.Close()
	r.sampleDisk()

	if last != '\n' && last != 0 {
		fmt.Fprintln(r.out)
	}
	code := exitCode(err)
	if code < 0 {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
				if r.over == nil {
					fmt.Fprintf(r.out, "%sthe test binary was killed by %v\n", budgetline.Prefix, ws.Signal())
				}
			}
		}
		if code < 0 {
			fmt.Fprintln(r.out, budgetline.Prefix+err.Error())
			code = 1
		}
	}
	if r.over != nil {
		r.report(err)
		code = 1
	}
	fmt.Fprintln(r.out, budgetline.Peak{Memory: r.peakMem, MemoryBudget: r.cfg.memory, Disk: r.peakDisk, DiskBudget: r.cfg.disk})
	return code
}

func exitCode(err error) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	return -1
}

// relay copies the binary's output as it comes, feeding the tracker, and
// at its end sends the last byte it copied (0: none).
func (r *runner) relay(src io.Reader, last chan<- byte) {
	buf := make([]byte, 64<<10)
	var end byte
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.tests.write(buf[:n])
			r.out.Write(buf[:n]) //nolint:errcheck // a closed output: keep reading, so the binary is not blocked
			end = buf[n-1]
		}
		if err != nil {
			last <- end
			return
		}
	}
}

// The disk is walked at most every diskEvery, and never for more than a
// twentieth of the time.
const diskEvery = 500 * time.Millisecond

func (r *runner) monitor(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(r.cfg.sample)
	defer tick.Stop()
	nextDisk := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		r.sampleMemory()
		if now := time.Now(); !now.Before(nextDisk) {
			r.sampleDisk()
			nextDisk = time.Now().Add(max(diskEvery, 20*time.Since(now)))
		}
	}
}

func (r *runner) sampleMemory() {
	m, err := r.cg.memory()
	if err != nil {
		return
	}
	ooms := r.cg.ooms()
	r.mu.Lock()
	r.peakMem = max(r.peakMem, m)
	newOOMs := ooms - r.ooms
	r.mu.Unlock()
	switch {
	case newOOMs > 0:
		// The kernel takes the file cache back before it kills: what the
		// cgroup held reached about its limit.
		r.mu.Lock()
		r.peakMem = max(r.peakMem, r.cfg.limit)
		r.mu.Unlock()
		r.overrun(fmt.Sprintf("the kernel's OOM killer killed %s in the test binary's cgroup at its hard limit of %s (the budget: %s)",
			plural(newOOMs, "process", "processes"), budgetline.FormatSize(r.cfg.limit), r.budgetName(r.cfg.memory)),
			"what the test binary and the processes it started held, file cache aside, passed the budget faster than it is read"+r.largestProcess())
	case r.cfg.memory > 0 && m > r.cfg.memory:
		r.overrun(fmt.Sprintf("memory %s over the budget of %s", budgetline.FormatSize(m), r.budgetName(r.cfg.memory)),
			"what the test binary and the processes it started held, file cache aside"+r.largestProcess())
	}
}

func (r *runner) sampleDisk() {
	n, top, topSize := diskUsage(r.tmp)
	r.mu.Lock()
	r.peakDisk = max(r.peakDisk, n)
	r.mu.Unlock()
	if r.cfg.disk > 0 && n > r.cfg.disk {
		r.overrun(fmt.Sprintf("disk %s over the budget of %s", budgetline.FormatSize(n), r.budgetName(r.cfg.disk)),
			fmt.Sprintf("the files under the test binary's TMPDIR, the most in %s (%s)", top, budgetline.FormatSize(topSize)))
	}
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func (r *runner) budgetName(n int64) string {
	if r.cfg.name == "" {
		return budgetline.FormatSize(n)
	}
	return budgetline.FormatSize(n) + " (" + r.cfg.name + ")"
}

// largestProcess names the cgroup's process that holds the most memory.
func (r *runner) largestProcess() string {
	var best string
	var most int64
	for _, pid := range r.cg.pids() {
		st, err := readStatus(pid)
		if err != nil {
			continue
		}
		if n := kB(st["RssAnon"]) + kB(st["RssShmem"]); n > most {
			most, best = n, fmt.Sprintf("%s, pid %d", st["Name"], pid)
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; the most in one process: %s (%s; its RssAnon and RssShmem)", budgetline.FormatSize(most), best)
}

// kB reads a figure of /proc/PID/status ("1234 kB") in bytes.
func kB(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(s, " kB"), 10, 64)
	return n << 10
}

func readStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	st := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		st[k] = strings.TrimSpace(v)
	}
	return st, nil
}

// overrun records the first budget passed and stops the binary: SIGQUIT,
// for its goroutines' stacks, then SIGKILL to the whole cgroup if it has
// not ended in stopWait.
func (r *runner) overrun(what, detail string) {
	leaves, parents := r.tests.busy()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.over != nil {
		return
	}
	r.over = &overrun{what: what, detail: detail, leaves: leaves, parents: parents}
	select {
	case <-r.exited:
		return
	default:
	}
	r.over.stopped = true
	r.proc.Signal(syscall.SIGQUIT) //nolint:errcheck // gone is fine
	go func(exited <-chan struct{}) {
		select {
		case <-exited:
		case <-time.After(r.cfg.stopWait):
			r.cg.kill() //nolint:errcheck // reported after the binary's end
		}
	}(r.exited)
}

// report fails the tests that were running at the overrun, each with the
// figure: a report line as the testing package writes it, which
// cmd/test2json reads as the test's end, and the message under it; then
// their parents. With no test running (TestMain, say), the message stands
// alone and the binary's exit code fails its package.
func (r *runner) report(end error) {
	o := r.over
	mark := ""
	if r.tests.marked || r.json() {
		mark = string(rune(marker))
	}
	how := "the test binary had ended (" + end.Error() + ")"
	if end == nil {
		how = "the test binary had ended"
	}
	if o.stopped {
		how = "the test binary was stopped with SIGQUIT (its goroutines are above)"
	}
	if len(o.leaves) == 0 {
		fmt.Fprintf(r.out, "%s%s while no test ran: %s; %s\n", budgetline.Prefix, o.what, o.detail, how)
		return
	}
	names := make([]string, len(o.leaves))
	for i, t := range o.leaves {
		names[i] = t.name
	}
	while := "while it ran"
	if len(o.leaves) > 1 {
		while = fmt.Sprintf("while %d tests ran (%s)", len(o.leaves), strings.Join(names, ", "))
	}
	for _, t := range o.leaves {
		fmt.Fprintf(r.out, "%s--- FAIL: %s (%.2fs)\n    %s%s %s: %s; %s\n", mark, t.name, t.elapsed.Seconds(), budgetline.Prefix, o.what, while, o.detail, how)
	}
	for _, t := range o.parents {
		fmt.Fprintf(r.out, "%s--- FAIL: %s (%.2fs)\n", mark, t.name, t.elapsed.Seconds())
	}
	// As the testing package ends a failed run; the lines after it are
	// the package's, not the last test's.
	fmt.Fprintf(r.out, "%sFAIL\n", mark)
}

// json is whether go test -json runs the binary (-test.v=test2json).
func (r *runner) json() bool {
	for _, a := range r.argv[1:] {
		if a == "-test.v=test2json" || a == "--test.v=test2json" {
			return true
		}
	}
	return false
}

// join runs as the binary's first process: into the cgroup, then the
// binary.
func join(procs string, argv []string) {
	err := writeFile(procs, strconv.Itoa(os.Getpid()))
	if err == nil {
		var path string
		if path, err = exec.LookPath(argv[0]); err == nil {
			err = syscall.Exec(path, argv, os.Environ())
		}
	}
	fmt.Fprintf(os.Stderr, "%sthe test binary: %v\n", budgetline.Prefix, err)
	os.Exit(125)
}

// sweepDirs removes the directories a killed run of this program left in
// the temporary directory: those that the record of a process gone names.
func sweepDirs() {
	records, _ := filepath.Glob(filepath.Join(os.TempDir(), "."+namePrefix+"*"))
	for _, rec := range records {
		pid, ok := ownerPid(strings.TrimPrefix(filepath.Base(rec), "."))
		if !ok || pid == os.Getpid() || alive(pid) {
			continue
		}
		if !ours(rec) {
			continue
		}
		if dir, err := os.ReadFile(rec); err == nil && filepath.Dir(string(dir)) == os.TempDir() && strings.HasPrefix(filepath.Base(string(dir)), "b") && ours(string(dir)) {
			os.RemoveAll(string(dir)) //nolint:errcheck // best effort: the next run tries again
		}
		os.Remove(rec) //nolint:errcheck
	}
}

// ours is whether this user owns path (in a /tmp that every user writes).
func ours(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Sys().(*syscall.Stat_t).Uid == uint32(os.Geteuid())
}
