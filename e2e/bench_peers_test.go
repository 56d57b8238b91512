package e2e

// The benchmarks of docs/benchmarks.md that set the supervisor against the
// peers it replaces, beside bench_test.go's: `exec` against scuttle's
// wait-run-quit pattern, the CPU a drain costs while the app still listens
// (against the netstat preStop loop), and the memory a load burst leaves.
// Peer binaries (pilot-agent, scuttle) come from $PS_BENCH_BIN, where
// scripts/bench.sh builds them; an arm whose binary is missing is skipped
// with a NOTE line.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchPeerBin is the path of a peer binary in $PS_BENCH_BIN, or "".
func benchPeerBin(name string) string {
	dir := os.Getenv("PS_BENCH_BIN")
	if dir == "" {
		return ""
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		fmt.Printf("NOTE\t%s\tnot in PS_BENCH_BIN; its arms are left out\n", name)
		return ""
	}
	return path
}

// benchTmpfsDir is a fresh directory on tmpfs (/dev/shm), as a control dir
// on an emptyDir with `medium: Memory` is.
func benchTmpfsDir(b *testing.B) string {
	b.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "psb")
	if err != nil {
		b.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// procCPU is the CPU time of every thread of pid, from the scheduler's own
// nanosecond accounting (/proc/PID/task/*/schedstat).
func procCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("schedstat of %d: %v", pid, err)
	}
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that ended
		}
		f := strings.Fields(string(raw))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q", t, raw)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// cpuPerSecond is pid's CPU in ms per second over d.
func cpuPerSecond(b *testing.B, pid int, d time.Duration) float64 {
	b.Helper()
	return 1000 * cpuShare(b, pid, d)
}

// BenchmarkExec times `proxy-supervisor exec -- true` with the proxy ready,
// the whole process, from its start to its exit (it records the completion
// durably, so the control dir's filesystem matters: ext4, the node's disk,
// and tmpfs, an emptyDir with `medium: Memory`), against the scuttle pattern
// (scripts/scuttle: poll /server_info until LIVE, run `true`, POST
// /quitquitquit) on the same pod. The arms alternate sample by sample.
func BenchmarkExec(b *testing.B) {
	useBenchBins(b)
	scuttle := benchPeerBin("scuttle")
	if scuttle == "" {
		b.Skip("scuttle not built (scripts/bench.sh builds it into PS_BENCH_BIN)")
	}
	p := newPod(b)
	tmpfs := benchTmpfsDir(b)
	n := benchSamples(100)
	var ext4Ms, tmpfsMs, scuttleMs []float64
	for range b.N {
		for i := range n {
			for _, arm := range []struct {
				root string
				dst  *[]float64
			}{{p.dir, &ext4Ms}, {tmpfs, &tmpfsMs}} {
				dir := filepath.Join(arm.root, "x"+strconv.Itoa(i))
				if err := os.Mkdir(dir, 0o755); err != nil {
					b.Fatal(err)
				}
				sup := benchSupervise(b, p, nil, dir, nil)
				benchWaitReady(b, dir, sup)
				start := time.Now()
				e := p.start("exec", false, nil, bin.supervisor, "exec", "--control-dir", dir, "--", "true")
				if code := e.Exit(10 * time.Second); code != 0 {
					b.Fatalf("exec exit %d:\n%s", code, e.Out.String())
				}
				*arm.dst = append(*arm.dst, millis(e.Ended().Sub(start)))
				if code := sup.Exit(10 * time.Second); code != 0 {
					b.Fatalf("supervisor exit %d:\n%s", code, sup.Out.String())
				}
			}
			envoy := p.start("fake-envoy", true, nil, bin.envoy)
			p.waitHTTP("http://127.0.0.1:15000/ready", 200, 10*time.Second)
			start := time.Now()
			sc := p.start("scuttle", false, []string{"ENVOY_ADMIN_API=http://127.0.0.1:15000"}, scuttle, "true")
			if code := sc.Exit(10 * time.Second); code != 0 {
				b.Fatalf("scuttle exit %d:\n%s", code, sc.Out.String())
			}
			scuttleMs = append(scuttleMs, millis(sc.Ended().Sub(start)))
			if code := envoy.Exit(10 * time.Second); code != 0 {
				b.Fatalf("fake-envoy exit %d:\n%s", code, envoy.Out.String())
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	const section = "exec -- true, proxy ready: whole process"
	e := reportRow(b, section, "proxy-supervisor exec, control dir on ext4", "exec-ext4", ext4Ms)
	t := reportRow(b, section, "proxy-supervisor exec, control dir on tmpfs (medium: Memory)", "exec-tmpfs", tmpfsMs)
	s := reportRow(b, section, "baseline: scuttle pattern (poll /server_info, run, POST /quitquitquit)", "scuttle", scuttleMs)
	reportTarget("exec", "`exec -- true` p50 on ext4, against scuttle's p50", fmt.Sprintf("%.2f vs %.2f ms", e.p50, s.p50), "<= scuttle", e.p50 <= s.p50)
	reportTarget("exec", "`exec -- true` p50 on tmpfs, against scuttle's p50", fmt.Sprintf("%.2f vs %.2f ms", t.p50, s.p50), "<= scuttle", t.p50 <= s.p50)
}

// BenchmarkDrainCPU measures the supervisor's CPU, in ms per second, ready
// and idle, and then while a drain waits on an app that still listens (the
// drain's scan tick is what costs); and the netstat preStop loop's own CPU
// for the same wait (four rounds of its loop, from its shell's and
// children's times, which the kernel counts in 10 ms ticks).
func BenchmarkDrainCPU(b *testing.B) {
	useBenchBins(b)
	benchNeedTool(b, "netstat")
	p := newPod(b)
	rounds := max(benchSamples(5), 3)
	const window = 4 * time.Second
	const loop = `i=0; while [ $i -lt 4 ] && [ $(netstat -plunt | grep tcp | grep -v envoy | grep -v proxy-sup | wc -l) -ne 0 ]; do sleep 1; i=$((i+1)); done; cat /proc/$$/stat`
	var idle, draining, netstat []float64
	for range b.N {
		for r := range rounds {
			dir := filepath.Join(p.dir, "cpu"+strconv.Itoa(r))
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			sup := benchSupervise(b, p, nil, dir, []string{"--drain-min", "0s", "--drain-timeout", "60s"})
			benchWaitReady(b, dir, sup)
			ln := p.listen("tcp", "127.0.0.1:8080")
			time.Sleep(time.Second)
			idle = append(idle, cpuPerSecond(b, sup.Pid(), window))
			hook := p.start("prestop", false, nil, bin.supervisor, "prestop", "--control-dir", dir)
			sup.WaitLog(`msg="drain started"`, 10*time.Second)
			time.Sleep(500 * time.Millisecond)
			draining = append(draining, cpuPerSecond(b, sup.Pid(), window))

			start := time.Now()
			sh := p.start("netstat loop", false, nil, "sh", "-c", loop)
			if code := sh.Exit(20 * time.Second); code != 0 {
				b.Fatalf("netstat loop exit %d:\n%s", code, sh.Out.String())
			}
			f := strings.Fields(sh.Out.String())
			if len(f) < 17 {
				b.Fatalf("netstat loop: no stat line:\n%s", sh.Out.String())
			}
			ticks := 0
			for _, v := range f[13:17] { // utime stime cutime cstime
				n, err := strconv.Atoi(v)
				if err != nil {
					b.Fatalf("stat %q: %v", sh.Out.String(), err)
				}
				ticks += n
			}
			netstat = append(netstat, float64(ticks)*10/time.Since(start).Seconds())

			if hook.Exited() {
				b.Fatalf("prestop returned while the app listened:\n%s", hook.Out.String())
			}
			ln.Close()
			if code := hook.Exit(10 * time.Second); code != 0 {
				b.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
			}
			sup.Kill()
		}
	}
	b.ReportMetric(0, "ns/op")
	const section = "CPU while a drain waits on a listening app (ms of CPU per second)"
	i := medianOf(idle)
	d := medianOf(draining)
	n := medianOf(netstat)
	fmt.Printf("CPU\t%s\tproxy-supervisor, ready, before the drain\truns=%d\tmedian=%.2f\tmin=%.2f\tmax=%.2f\n", section, len(idle), i, slices.Min(idle), slices.Max(idle))
	fmt.Printf("CPU\t%s\tproxy-supervisor, draining, app listening\truns=%d\tmedian=%.2f\tmin=%.2f\tmax=%.2f\n", section, len(draining), d, slices.Min(draining), slices.Max(draining))
	fmt.Printf("CPU\t%s\tbaseline: netstat -plunt loop, sleep 1\truns=%d\tmedian=%.2f\tmin=%.2f\tmax=%.2f\n", section, len(netstat), n, slices.Min(netstat), slices.Max(netstat))
	b.ReportMetric(d, "drain-cpu-ms/s")
	reportTarget("drain CPU", "supervisor CPU while draining on a listening app, median", fmt.Sprintf("%.2f ms/s", d), "< 5 ms/s", d < 5)
}

// BenchmarkMemoryAfterBurst samples the memory of a ready supervisor idle,
// at the end of one 5 s wrk burst on /healthz/ready (2 threads, 16
// connections) and 10, 30 and 60 s after it; beside it, in another pod, a
// control supervisor of the same age that gets no burst, so that what the
// burst leaves is told from what the runtime's first collections cost any
// idle supervisor (none has run 5 s after the start; one or two have a
// minute later).
func BenchmarkMemoryAfterBurst(b *testing.B) {
	useBenchBins(b)
	benchNeedTool(b, "wrk")
	p, pc := newPod(b), newPod(b)
	for range b.N {
		sup := benchSupervise(b, p, nil, p.dir, nil)
		ctl := benchSupervise(b, pc, nil, pc.dir, nil)
		benchWaitReady(b, p.dir, sup)
		benchWaitReady(b, pc.dir, ctl)
		sample := func(when string) map[string]float64 {
			st, err := procStatusKB(sup.Pid(), "VmRSS", "RssAnon")
			if err != nil {
				b.Fatal(err)
			}
			c, err := procStatusKB(ctl.Pid(), "VmRSS", "RssAnon")
			if err != nil {
				b.Fatal(err)
			}
			fmt.Printf("BURST\t%s\tVmRSS=%.0f\tRssAnon=%.0f\tcontrol VmRSS=%.0f\tcontrol RssAnon=%.0f\n", when, st["VmRSS"], st["RssAnon"], c["VmRSS"], c["RssAnon"])
			return st
		}
		time.Sleep(5 * time.Second)
		sample("idle, 5 s after ready")
		w := p.start("wrk", false, nil, "wrk", "-t2", "-c16", "-d5s", "http://"+benchHealthAddr+"/healthz/ready")
		if code := w.Exit(30 * time.Second); code != 0 {
			b.Fatalf("wrk exit %d:\n%s", code, w.Out.String())
		}
		end := time.Now()
		sample("at the burst's end")
		var last map[string]float64
		for _, after := range []time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second} {
			time.Sleep(time.Until(end.Add(after)))
			last = sample(fmt.Sprintf("%v after", after))
		}
		if sup.Exited() || ctl.Exited() {
			b.Fatalf("supervisor exited:\n%s\n%s", sup.Out.String(), ctl.Out.String())
		}
		sup.Kill()
		ctl.Kill()
		reportTarget("memory after load", "VmRSS / RssAnon 60 s after a 5 s wrk burst", fmt.Sprintf("%.0f / %.0f kB", last["VmRSS"], last["RssAnon"]),
			"<= 8192 / 2048 kB (idle targets)", last["VmRSS"] <= 8192 && last["RssAnon"] <= 2048)
	}
	b.ReportMetric(0, "ns/op")
}
