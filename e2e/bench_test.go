package e2e

// The benchmarks of docs/benchmarks.md. Each one is an end-to-end measurement
// in pod sandboxes (network namespaces held by a pause process, the supervisor
// as PID 1 of a new PID namespace), so each runs its samples once, in one
// iteration, and reports percentiles with b.ReportMetric (ns/op is
// suppressed). They also print tab-separated lines that scripts/bench.sh
// gathers into its summary:
//
//	ROW     section  subject  n=…  p50=…  p90=…  p99=…  max=…  mean=… (milliseconds)
//	MEM     subject  runs  VmRSS/RssAnon/RssFile medians (kB) …
//	TARGET  section  what  measured  target  MET|MISSED
//
// Run them all (root; tini, dumb-init, curl, netstat and wrk in PATH):
//
//	PS_BENCH_BIN=$PWD/bin go -C e2e test -run '^$' -bench . -benchtime 1x -timeout 30m .
//
// PS_BENCH_BIN names a directory holding release builds (make build) of
// proxy-supervisor and fake-envoy, and storm (go build ./scripts/storm); by
// default the binaries TestMain built are used, and storm is built too.
// PS_BENCH_QUICK=1 takes a tenth of the samples, for a smoke run. Not under
// -race: the binaries built here would then be race-instrumented.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

const benchHealthAddr = "127.0.0.1:15022"

// useBenchBins points the harness at the release builds in $PS_BENCH_BIN.
func useBenchBins(b *testing.B) {
	b.Helper()
	dir := os.Getenv("PS_BENCH_BIN")
	if dir == "" {
		return
	}
	for _, name := range []string{"proxy-supervisor", "fake-envoy"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			b.Fatalf("PS_BENCH_BIN: %v", err)
		}
	}
	bin.supervisor = filepath.Join(dir, "proxy-supervisor")
	bin.envoy = filepath.Join(dir, "fake-envoy")
}

// samples scales a sample count down under PS_BENCH_QUICK.
func benchSamples(n int) int {
	if os.Getenv("PS_BENCH_QUICK") != "" {
		return max(n/10, 5)
	}
	return n
}

func benchNeedTool(b *testing.B, names ...string) {
	b.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			b.Skipf("%s not in PATH (scripts/bench.sh installs it)", name)
		}
	}
}

// benchSupervise starts the supervisor as PID 1 in the pod with the fake Envoy as
// its proxy, its control socket in dir.
func benchSupervise(b *testing.B, p *pod, env []string, dir string, flags []string, envoyFlags ...string) *proctest.Proc {
	b.Helper()
	argv := append([]string{bin.supervisor, "supervise", "--control-dir", dir, "--health-addr", benchHealthAddr}, flags...)
	argv = append(argv, "--", bin.envoy)
	return p.start("supervisor", true, env, append(argv, envoyFlags...)...)
}

// untuned bypasses main()'s memory tuning of the runtime and leaves Go's
// defaults (main() sets only what the environment does not: GOMAXPROCS stays
// 1). It applies to the client commands too, so both sides get it.
var untuned = []string{"GOGC=100", "GOMEMLIMIT=off"}

const untunedName = "Go defaults (GOGC=100 GOMEMLIMIT=off)"

// waitSocket waits (bounded) until a unix socket accepts connections.
func benchWaitSocket(b *testing.B, path string, sup *proctest.Proc) {
	b.Helper()
	var err error
	accepts := func() bool {
		var c net.Conn
		if c, err = net.Dial("unix", path); err == nil {
			c.Close()
		}
		return err == nil || sup.Exited()
	}
	if !proctest.Until(10*time.Second, accepts) || err != nil {
		b.Fatalf("%s never accepted (%v):\n%s", path, err, sup.Out.String())
	}
}

// waitReady waits (bounded) for the supervisor in dir to report ready, on
// its control socket.
func benchWaitReady(b *testing.B, dir string, sup *proctest.Proc) {
	b.Helper()
	benchWaitSocket(b, control.SocketPath(dir), sup)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ready, why, err := control.NewClient(dir).Ready(ctx, 10*time.Second)
	if !ready {
		b.Fatalf("not ready: %s %v:\n%s", why, err, sup.Out.String())
	}
}

// --- statistics and reporting ---

func millis(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

type latDist struct {
	n                        int
	p50, p90, p99, max, mean float64
}

// pct is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func latDistOf(v []float64) latDist {
	s := slices.Clone(v)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return latDist{n: len(s), p50: percentile(s, .5), p90: percentile(s, .9), p99: percentile(s, .99), max: s[len(s)-1], mean: sum / float64(len(s))}
}

// row prints and reports one latency distribution in milliseconds; key
// prefixes the metric units.
func reportRow(b *testing.B, section, subject, key string, v []float64) latDist {
	d := latDistOf(v)
	fmt.Printf("ROW\t%s\t%s\tn=%d\tp50=%.3f\tp90=%.3f\tp99=%.3f\tmax=%.3f\tmean=%.3f\n",
		section, subject, d.n, d.p50, d.p90, d.p99, d.max, d.mean)
	b.ReportMetric(d.p50, key+"-p50-ms")
	b.ReportMetric(d.p90, key+"-p90-ms")
	b.ReportMetric(d.p99, key+"-p99-ms")
	b.ReportMetric(d.max, key+"-max-ms")
	return d
}

func reportTarget(section, what, measured, goal string, met bool) {
	verdict := "MISSED"
	if met {
		verdict = "MET"
	}
	fmt.Printf("TARGET\t%s\t%s\t%s\t%s\t%s\n", section, what, measured, goal, verdict)
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// --- 1. idle memory ---

// statusKB reads kB fields of /proc/PID/status.
func procStatusKB(pid int, fields ...string) (map[string]float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	got := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(fields, k) {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q", k, v)
		}
		got[k] = f
	}
	return got, nil
}

// idleTargets reports the idle-memory targets for what, whose medians are
// rss (VmRSS) and anon (RssAnon) in kB.
func idleTargets(what string, rss, anon float64) {
	reportTarget("idle memory", what+": VmRSS", fmt.Sprintf("%.0f kB", rss), "<= 8 MiB (8192 kB)", rss <= 8192)
	reportTarget("idle memory", what+": RssAnon", fmt.Sprintf("%.0f kB", anon), "<= 2 MiB (2048 kB)", anon <= 2048)
}

// BenchmarkIdleMemory samples the resident memory of each init, PID 1 of a
// new PID namespace in its own pod, after ~5 s of idling: the supervisor with
// `sleep 1000` as its child (the admin API refuses, so the tracker polls every
// 10 ms), the supervisor with the fake Envoy once ready, each also with
// Go's defaults for the collector (untuned: without main()'s memory tuning),
// and tini and dumb-init with `sleep 1000`.
// Each round starts every subject at once; the figures are medians over the
// rounds. The 5 s figure comes before the Go runtime's first collection,
// which leaves about half a megabyte of its own bookkeeping resident for
// good, so the last round goes on to a steady state: 70 s, with a readiness
// probe every second as a kubelet's would come, and that sample is reported
// beside it, with the targets.
func BenchmarkIdleMemory(b *testing.B) {
	useBenchBins(b)
	benchNeedTool(b, "tini", "dumb-init")
	const idle, steady = 5 * time.Second, 70 * time.Second
	rounds := max(benchSamples(5), 5)
	type subject struct {
		name  string
		env   []string
		argv  func(dir string) []string
		envoy bool // wait for the fake Envoy to be ready before idling
	}
	sup := func(dir string, child ...string) []string {
		return append([]string{bin.supervisor, "supervise", "--control-dir", dir, "--health-addr", benchHealthAddr, "--"}, child...)
	}
	// The first shipped subjects are the supervisor as shipped, which the
	// targets are for; the rest are Go's defaults and the baselines.
	const shipped = 2
	subjects := []subject{
		{name: "proxy-supervisor -- sleep", argv: func(d string) []string { return sup(d, "sleep", "1000") }},
		{name: "proxy-supervisor -- fake-envoy (ready)", argv: func(d string) []string { return sup(d, bin.envoy) }, envoy: true},
		{name: "proxy-supervisor -- sleep, " + untunedName, env: untuned, argv: func(d string) []string { return sup(d, "sleep", "1000") }},
		{name: "proxy-supervisor -- fake-envoy (ready), " + untunedName, env: untuned, argv: func(d string) []string { return sup(d, bin.envoy) }, envoy: true},
		{name: "tini -- sleep", argv: func(string) []string { return []string{"tini", "--", "sleep", "1000"} }},
		{name: "dumb-init sleep", argv: func(string) []string { return []string{"dumb-init", "sleep", "1000"} }},
	}
	fields := []string{"VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads"}
	got := make([]map[string][]float64, len(subjects))
	late := make([]map[string]float64, len(subjects)) // the steady sample
	for i := range got {
		got[i] = map[string][]float64{}
	}
	for range b.N {
		for round := range rounds {
			var wg sync.WaitGroup
			var mu sync.Mutex
			for i, s := range subjects {
				p := newPod(b)
				pr := p.start(s.name, true, s.env, s.argv(p.dir)...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer pr.Kill()
					if s.envoy {
						ready := func() bool {
							code, _ := p.get("http://" + benchHealthAddr + "/healthz/ready")
							return code == 200 || pr.Exited()
						}
						if !proctest.Until(10*time.Second, ready) || pr.Exited() {
							b.Errorf("%s: never ready:\n%s", s.name, pr.Out.String())
							return
						}
					}
					start := time.Now()
					time.Sleep(idle)
					if pr.Exited() {
						b.Errorf("%s exited %d:\n%s", s.name, pr.Code(), pr.Out.String())
						return
					}
					st, err := procStatusKB(pr.Pid(), fields...)
					if err != nil {
						b.Errorf("%s: %v", s.name, err)
						return
					}
					mu.Lock()
					for k, v := range st {
						got[i][k] = append(got[i][k], v)
					}
					mu.Unlock()
					if round < rounds-1 {
						return
					}
					for time.Since(start) < steady && !pr.Exited() {
						if strings.HasPrefix(s.name, "proxy-supervisor") {
							p.get("http://" + benchHealthAddr + "/healthz/ready")
						}
						time.Sleep(time.Second)
					}
					if st, err = procStatusKB(pr.Pid(), fields...); err != nil || pr.Exited() {
						b.Errorf("%s at %v: %v (exited: %v)", s.name, steady, err, pr.Exited())
						return
					}
					mu.Lock()
					late[i] = st
					mu.Unlock()
				}()
			}
			wg.Wait()
			if b.Failed() {
				b.FailNow()
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	for i, s := range subjects {
		g := got[i]
		fmt.Printf("MEM\t%s\truns=%d\tVmRSS=%.0f\tRssAnon=%.0f\tRssFile=%.0f\tVmHWM=%.0f\tThreads=%.0f\t(VmRSS min %.0f max %.0f; RssAnon min %.0f max %.0f)\n",
			s.name, len(g["VmRSS"]), medianOf(g["VmRSS"]), medianOf(g["RssAnon"]), medianOf(g["RssFile"]), medianOf(g["VmHWM"]), medianOf(g["Threads"]),
			slices.Min(g["VmRSS"]), slices.Max(g["VmRSS"]), slices.Min(g["RssAnon"]), slices.Max(g["RssAnon"]))
		if i < shipped {
			key := []string{"sleep", "envoy"}[i]
			b.ReportMetric(medianOf(g["VmRSS"]), key+"-VmRSS-kB")
			b.ReportMetric(medianOf(g["RssAnon"]), key+"-RssAnon-kB")
			idleTargets(s.name, medianOf(g["VmRSS"]), medianOf(g["RssAnon"]))
		}
	}
	for i, s := range subjects {
		st := late[i]
		fmt.Printf("MEM\t%s, at %v, probed every 1 s\truns=1\tVmRSS=%.0f\tRssAnon=%.0f\tRssFile=%.0f\tVmHWM=%.0f\tThreads=%.0f\n",
			s.name, steady, st["VmRSS"], st["RssAnon"], st["RssFile"], st["VmHWM"], st["Threads"])
		if i < shipped {
			idleTargets(fmt.Sprintf("%s, at %v (steady, probed every 1 s)", s.name, steady), st["VmRSS"], st["RssAnon"])
		}
	}
	if fi, err := os.Stat(bin.supervisor); err == nil {
		fmt.Printf("NOTE\tidle memory\tthe binary, %s, is %d bytes (%.2f MiB)\n", filepath.Base(bin.supervisor), fi.Size(), float64(fi.Size())/(1<<20))
		b.ReportMetric(float64(fi.Size()), "binary-bytes")
	}
}

// --- 2. orphan storm ---

var benchStormLine = regexp.MustCompile(`storm n=(\d+) handed=(\d+) spawn_ms=([\d.]+) reap_ms=([\d.]+) total_ms=([\d.]+) left=(\d+)`)

func benchStormBin(b *testing.B) string {
	b.Helper()
	if dir := os.Getenv("PS_BENCH_BIN"); dir != "" {
		if path := filepath.Join(dir, "storm"); benchFileExists(path) {
			return path
		}
	}
	return proctest.Build(b, proctest.Storm)
}

func benchFileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// BenchmarkOrphanStorm hands 5000 zombie orphans at once to each reaper,
// PID 1 of a new PID namespace (`unshare --pid --fork --mount-proc REAPER --
// storm -n 5000`), and times, from inside the namespace, the start until no
// process but PID 1 and storm is left (total) and the hand-off until then
// (reap). The runs alternate between the reapers.
func BenchmarkOrphanStorm(b *testing.B) {
	useBenchBins(b)
	benchNeedTool(b, "tini", "dumb-init", "unshare", "perl")
	storm := benchStormBin(b)
	const n = 5000
	runs := max(benchSamples(15), 5)
	ctlDir := b.TempDir()
	reapers := []struct {
		name string
		argv []string
	}{
		{"tini", []string{"tini", "--"}},
		{"dumb-init", []string{"dumb-init"}},
		{"proxy-supervisor", []string{bin.supervisor, "supervise", "--health-addr", "", "--admin-url", "http://127.0.0.1:9", "--control-dir", ctlDir, "--"}},
	}
	type res struct{ total, reap, wall []float64 }
	results := make([]res, len(reapers))
	run := func(i int) (total, reap, wall float64) {
		argv := append([]string{"unshare", "--pid", "--fork", "--mount-proc"}, reapers[i].argv...)
		argv = append(argv, storm, "-n", strconv.Itoa(n))
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = cleanEnv(nil)
		var stdout, stderr proctest.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v\n%s%s", reapers[i].name, err, stdout.String(), stderr.String())
		}
		wall = millis(time.Since(start))
		m := benchStormLine.FindStringSubmatch(stdout.String())
		if m == nil {
			b.Fatalf("%s: no storm line:\n%s%s", reapers[i].name, stdout.String(), stderr.String())
		}
		if m[6] != "0" {
			b.Fatalf("%s left %s zombies", reapers[i].name, m[6])
		}
		total, _ = strconv.ParseFloat(m[5], 64)
		reap, _ = strconv.ParseFloat(m[4], 64)
		return total, reap, wall
	}
	for range b.N {
		for i := range reapers { // warm-up, not counted
			run(i)
		}
		for r := range runs {
			for k := range reapers {
				i := (r + k) % len(reapers)
				total, reap, wall := run(i)
				results[i].total = append(results[i].total, total)
				results[i].reap = append(results[i].reap, reap)
				results[i].wall = append(results[i].wall, wall)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	for i, r := range reapers {
		reportRow(b, "orphan storm: start to zero zombies", r.name, r.name+"-total", results[i].total)
		reportRow(b, "orphan storm: hand-off to zero zombies", r.name, r.name+"-reap", results[i].reap)
		reportRow(b, "orphan storm: wall time of the whole command", r.name, r.name+"-wall", results[i].wall)
	}
	tini, sup := medianOf(results[0].total), medianOf(results[2].total)
	reportTarget("orphan storm", "proxy-supervisor/tini, median start to zero zombies (5000 orphans, none left)",
		fmt.Sprintf("%.3f (%.1f vs %.1f ms)", sup/tini, sup, tini), "<= 1.2x", sup <= 1.2*tini)
	tr, sr := medianOf(results[0].reap), medianOf(results[2].reap)
	fmt.Printf("NOTE\torphan storm\treap phase alone: proxy-supervisor/tini = %.2f (%.1f vs %.1f ms median)\n", sr/tr, sr, tr)
}

// --- 3. readiness ---

// poller is the baseline: pilot-agent wait's loop, a GET of /healthz/ready
// 500 ms after its start and every 500 ms after that, each on a new
// connection.
func pollLoop(p *pod, url string, every time.Duration, stop <-chan struct{}) <-chan time.Time {
	ch := make(chan time.Time, 1)
	start := time.Now()
	go func() {
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Until(start.Add(time.Duration(k) * every))):
			}
			if code, _ := p.get(url); code == 200 {
				ch <- time.Now()
				return
			}
		}
	}()
	return ch
}

// BenchmarkReadiness times, from the fake Envoy turning LIVE (a `state LIVE`
// on its control socket while it stays INITIALIZING by itself) to the exit of
// `proxy-supervisor wait --control-dir`, started 100-125 ms before the flip
// so that it is long-polling (the random part spreads the flip over the
// tracker's 10 ms poll phase). Each sample has a fresh supervisor. The
// samples alternate two to one between the binary as shipped and Go's
// defaults (`untuned`, for the supervisor and `wait` alike: both run main()'s
// tuning). In the first shipped samples the baseline runs alongside: a 500 ms poll loop like
// pilot-agent wait against /healthz/ready, started at a random phase before
// the flip.
func BenchmarkReadiness(b *testing.B) {
	useBenchBins(b)
	p := newPod(b)
	n, withBaseline := benchSamples(300), benchSamples(50)
	pilotAgent := benchPeerBin("pilot-agent")
	var waitMs, waitUntunedMs, pollMs, agentMs []float64
	for range b.N {
		for i := range n {
			tuned := i%3 != 2 // two of three samples as shipped
			var env []string
			if !tuned {
				env = untuned
			}
			dir := filepath.Join(p.dir, "r"+strconv.Itoa(i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			fakeCtl := filepath.Join(dir, "fake.sock")
			sup := benchSupervise(b, p, env, dir, nil, "--stay-initializing", "--control", fakeCtl)
			benchWaitSocket(b, control.SocketPath(dir), sup)
			benchWaitSocket(b, fakeCtl, sup)
			fc, err := net.Dial("unix", fakeCtl)
			if err != nil {
				b.Fatal(err)
			}
			var polled <-chan time.Time
			var agent *proctest.Proc
			stop := make(chan struct{})
			// The baselines take turns: the 500 ms poll loop, then
			// `pilot-agent wait` (its own 500 ms period) when it is built.
			if tuned && i/3 < 2*withBaseline {
				if (i/3)%2 == 0 || pilotAgent == "" {
					if len(pollMs) < withBaseline {
						polled = pollLoop(p, "http://"+benchHealthAddr+"/healthz/ready", 500*time.Millisecond, stop)
					}
				} else {
					agent = p.start("pilot-agent wait", false, nil, pilotAgent, "wait", "--url", "http://"+benchHealthAddr+"/healthz/ready", "--timeoutSeconds", "20")
				}
				if polled != nil || agent != nil {
					time.Sleep(rand.N(500 * time.Millisecond))
				}
			}
			w := p.start("wait", false, env, bin.supervisor, "wait", "--control-dir", dir, "--timeout", "20s")
			time.Sleep(100*time.Millisecond + rand.N(25*time.Millisecond))
			if w.Exited() {
				b.Fatalf("wait returned before the flip (%d):\n%s", w.Code(), w.Out.String())
			}
			flip := time.Now()
			if _, err := io.WriteString(fc, "state LIVE\n"); err != nil {
				b.Fatal(err)
			}
			if line, err := bufio.NewReader(fc).ReadString('\n'); err != nil || line != "ok\n" {
				b.Fatalf("fake control: %q %v", line, err)
			}
			if code := w.Exit(10 * time.Second); code != 0 {
				b.Fatalf("wait exit %d:\n%s", code, w.Out.String())
			}
			if tuned {
				waitMs = append(waitMs, millis(w.Ended().Sub(flip)))
			} else {
				waitUntunedMs = append(waitUntunedMs, millis(w.Ended().Sub(flip)))
			}
			if agent != nil {
				if code := agent.Exit(10 * time.Second); code != 0 {
					b.Fatalf("pilot-agent wait exit %d:\n%s", code, agent.Out.String())
				}
				agentMs = append(agentMs, millis(agent.Ended().Sub(flip)))
			}
			if polled != nil {
				select {
				case at := <-polled:
					pollMs = append(pollMs, millis(at.Sub(flip)))
				case <-time.After(5 * time.Second):
					b.Fatal("the baseline poll never saw ready")
				}
			}
			close(stop)
			fc.Close()
			sup.Kill()
		}
	}
	b.ReportMetric(0, "ns/op")
	const section = "readiness: LIVE to wait's exit"
	d := reportRow(b, section, "proxy-supervisor wait --control-dir", "wait", waitMs)
	reportRow(b, section, "proxy-supervisor wait --control-dir, "+untunedName, "wait-untuned", waitUntunedMs)
	reportRow(b, section, "baseline: 500 ms poll loop of /healthz/ready", "poll500", pollMs)
	if len(agentMs) > 0 {
		reportRow(b, section, "baseline: pilot-agent wait (500 ms period) on /healthz/ready", "pilot-agent", agentMs)
	}
	reportTarget("readiness", "LIVE to `wait` exit, p99 (as shipped)", fmt.Sprintf("%.2f ms", d.p99), "<= 15 ms", d.p99 <= 15)
}

// --- 4. /healthz/ready under a steady rate ---

func benchMonoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// sleepUntil sleeps until the CLOCK_MONOTONIC instant at, with the kernel's
// high-resolution timer: the Go scheduler's timers wake at a millisecond's
// granularity when the process is idle, and that lateness would be charged
// to the server.
func benchSleepUntil(at int64) {
	ts := unix.NsecToTimespec(at)
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
}

// openLoop sends GET path at rate per second for d over conns keep-alive
// connections; request k is due at start+k/rate whatever happened before,
// and its latency runs from that due time (no coordinated omission: a stall
// delays the requests queued behind it and they count it). It returns the
// latencies from the due time and from the actual send, in ms, of requests
// due after warm, and how many failed.
func benchOpenLoop(p *pod, addr, path string, rate int, d, warm time.Duration, conns int) (fromDue, fromSend []float64, errs int, err error) {
	total := int(d.Seconds() * float64(rate))
	interval := int64(time.Second) / int64(rate)
	skip := int(warm.Seconds() * float64(rate))
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: open-loop\r\n\r\n")
	type result struct {
		k        int
		due, snd float64
		ok       bool
	}
	results := make([][]result, conns)
	cs := make([]net.Conn, conns)
	for w := range conns {
		if cs[w], err = p.netns.Dial(context.Background(), "tcp", addr); err != nil {
			return nil, nil, 0, err
		}
		defer cs[w].Close()
	}
	start := benchMonoNow() + int64(50*time.Millisecond)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[w]
			br := bufio.NewReader(c)
			for k := w; k < total; k += conns {
				due := start + int64(k)*interval
				if benchMonoNow() < due {
					benchSleepUntil(due)
				}
				sent := benchMonoNow()
				ok := false
				if _, err := c.Write(req); err == nil {
					ok = benchReadOK(br)
				}
				end := benchMonoNow()
				results[w] = append(results[w], result{k, float64(end-due) / 1e6, float64(end-sent) / 1e6, ok})
				if !ok { // a broken connection: count the rest as failed
					for k += conns; k < total; k += conns {
						results[w] = append(results[w], result{k: k})
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, rs := range results {
		for _, r := range rs {
			if r.k < skip {
				continue
			}
			if !r.ok {
				errs++
				continue
			}
			fromDue = append(fromDue, r.due)
			fromSend = append(fromSend, r.snd)
		}
	}
	return fromDue, fromSend, errs, nil
}

// benchReadOK reads one response from br and reports whether it was a 200
// with its whole body. It allocates nothing, so that the generator's own
// collections do not land in the latencies it measures.
func benchReadOK(br *bufio.Reader) bool {
	status, err := br.ReadSlice('\n')
	if err != nil {
		return false
	}
	ok := bytes.HasPrefix(status, []byte("HTTP/1.1 200 "))
	size := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return false
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if len(line) > 15 && bytes.EqualFold(line[:15], []byte("content-length:")) {
			size = 0
			for _, d := range bytes.TrimSpace(line[15:]) {
				size = size*10 + int(d-'0')
			}
		}
	}
	if size < 0 {
		return false
	}
	_, err = br.Discard(size)
	return ok && err == nil
}

// BenchmarkHealthzReady holds 2000 req/s of GET /healthz/ready for 10 s
// (after 1 s of warm-up) against a ready supervisor, over 8 keep-alive
// connections, open loop; once as shipped and once with Go's defaults
// (untuned).
func BenchmarkHealthzReady(b *testing.B) {
	useBenchBins(b)
	p := newPod(b)
	const rate, conns = 2000, 8
	dur := 11 * time.Second
	if os.Getenv("PS_BENCH_QUICK") != "" {
		dur = 3 * time.Second
	}
	arms := []struct {
		name, key string
		env       []string
	}{
		{"as shipped", "", nil},
		{untunedName, "untuned-", untuned},
	}
	for _, arm := range arms {
		var due, sent []float64
		errs := 0
		for range b.N {
			sup := benchSupervise(b, p, arm.env, p.dir, nil)
			benchWaitReady(b, p.dir, sup)
			p.waitHTTP("http://"+benchHealthAddr+"/healthz/ready", 200, 10*time.Second)
			d, s, e, err := benchOpenLoop(p, benchHealthAddr, "/healthz/ready", rate, dur, time.Second, conns)
			if err != nil {
				b.Fatal(err)
			}
			due, sent, errs = append(due, d...), append(sent, s...), errs+e
			if sup.Exited() {
				b.Fatalf("supervisor exited %d:\n%s", sup.Code(), sup.Out.String())
			}
			sup.Kill()
		}
		const section = "/healthz/ready at 2000 req/s (open loop)"
		dd := reportRow(b, section, "latency from the due time, "+arm.name, arm.key+"due", due)
		reportRow(b, section, "latency from the actual send, "+arm.name, arm.key+"sent", sent)
		s := slices.Sorted(slices.Values(due))
		fmt.Printf("NOTE\t/healthz/ready\t%s: %d requests measured, %d failed; p99.9 from the due time %.3f ms\n", arm.name, len(due), errs, percentile(s, .999))
		b.ReportMetric(float64(errs), arm.key+"errors")
		if arm.env == nil {
			reportTarget("/healthz/ready", "p99 at 2000 req/s, open loop (as shipped)", fmt.Sprintf("%.3f ms (%d errors)", dd.p99, errs), "<= 1 ms", dd.p99 <= 1 && errs == 0)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkHealthzWrk is a closed-loop throughput figure for /healthz/ready
// from wrk (2 threads, 16 connections, 5 s), run inside the pod, as shipped
// and with Go's defaults (untuned).
func BenchmarkHealthzWrk(b *testing.B) {
	useBenchBins(b)
	benchNeedTool(b, "wrk")
	p := newPod(b)
	for range b.N {
		for _, arm := range []struct {
			name, key string
			env       []string
		}{{"as shipped", "", nil}, {untunedName, "untuned-", untuned}} {
			sup := benchSupervise(b, p, arm.env, p.dir, nil)
			benchWaitReady(b, p.dir, sup)
			w := p.start("wrk", false, nil, "wrk", "-t2", "-c16", "-d5s", "--latency", "http://"+benchHealthAddr+"/healthz/ready")
			if code := w.Exit(30 * time.Second); code != 0 {
				b.Fatalf("wrk exit %d:\n%s", code, w.Out.String())
			}
			out := w.Out.String()
			m := regexp.MustCompile(`Requests/sec:\s+([\d.]+)`).FindStringSubmatch(out)
			if m == nil || strings.Contains(out, "Non-2xx") {
				b.Fatalf("wrk:\n%s", out)
			}
			rps, _ := strconv.ParseFloat(m[1], 64)
			b.ReportMetric(rps, arm.key+"req/s")
			fmt.Printf("NOTE\t/healthz/ready\twrk -t2 -c16 -d5s, %s (closed loop, client on the same 2 cores): %.0f req/s\n", arm.name, rps)
			for _, line := range strings.Split(out, "\n") {
				fmt.Printf("WRK\t%s\t%s\n", arm.name, line)
			}
			sup.Kill()
		}
	}
	b.ReportMetric(0, "ns/op")
}

// --- 5. completion to exit ---

// BenchmarkCompletion times, with a ready supervisor whose fake Envoy exits
// at once on /quitquitquit, from the start of `proxy-supervisor complete` to
// the supervisor's exit. The samples alternate two to one between the binary
// as shipped and Go's defaults (`untuned`, for the supervisor and `complete`
// alike). The baseline is the shell workaround without a supervisor: the fake Envoy is the
// container's PID 1, and at the app's end a script polls readiness with curl
// (every 1 s until it answers) and then POSTs /quitquitquit; it is timed from
// the script's start to the proxy's exit.
func BenchmarkCompletion(b *testing.B) {
	useBenchBins(b)
	benchNeedTool(b, "curl")
	p := newPod(b)
	n, nBase := benchSamples(300), benchSamples(100)
	pilotAgent := benchPeerBin("pilot-agent")
	tmpfs := benchTmpfsDir(b)
	const workaround = `until curl -fsS http://127.0.0.1:15000/ready >/dev/null; do sleep 1; done; curl -fsS -X POST http://127.0.0.1:15000/quitquitquit >/dev/null`
	var ours, oursTmpfs, oursUntuned, base, agent []float64
	for range b.N {
		for i := range n {
			// as shipped on ext4, as shipped on tmpfs, Go's defaults on ext4
			tuned, onTmpfs := i%3 != 2, i%3 == 1
			var env []string
			if !tuned {
				env = untuned
			}
			root := p.dir
			if onTmpfs {
				root = tmpfs
			}
			dir := filepath.Join(root, "c"+strconv.Itoa(i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			sup := benchSupervise(b, p, env, dir, nil)
			benchWaitReady(b, dir, sup)
			time.Sleep(rand.N(20 * time.Millisecond))
			start := time.Now()
			c := p.start("complete", false, env, bin.supervisor, "complete", "--control-dir", dir)
			if code := sup.Exit(10 * time.Second); code != 0 {
				b.Fatalf("supervisor exit %d:\n%s", code, sup.Out.String())
			}
			switch took := millis(sup.Ended().Sub(start)); {
			case onTmpfs:
				oursTmpfs = append(oursTmpfs, took)
			case tuned:
				ours = append(ours, took)
			default:
				oursUntuned = append(oursUntuned, took)
			}
			if code := c.Exit(10 * time.Second); code != 0 {
				b.Fatalf("complete exit %d:\n%s", code, c.Out.String())
			}
			if strings.Contains(sup.Out.String(), "escalated") {
				b.Fatalf("the stop escalated:\n%s", sup.Out.String())
			}
		}
		for k := range 2 * nBase {
			useAgent := k%2 == 1
			if useAgent && pilotAgent == "" {
				continue
			}
			envoy := p.start("fake-envoy", true, nil, bin.envoy)
			p.waitHTTP("http://127.0.0.1:15000/ready", 200, 10*time.Second)
			time.Sleep(rand.N(20 * time.Millisecond))
			start := time.Now()
			argv := []string{"sh", "-c", workaround}
			if useAgent {
				argv = []string{pilotAgent, "request", "POST", "quitquitquit"}
			}
			cl := p.start(argv[0], false, nil, argv...)
			if code := envoy.Exit(10 * time.Second); code != 0 {
				b.Fatalf("fake-envoy exit %d:\n%s", code, envoy.Out.String())
			}
			if useAgent {
				agent = append(agent, millis(envoy.Ended().Sub(start)))
			} else {
				base = append(base, millis(envoy.Ended().Sub(start)))
			}
			cl.Exit(10 * time.Second)
		}
	}
	b.ReportMetric(0, "ns/op")
	const section = "completion: app's end to the proxy's exit"
	d := reportRow(b, section, "proxy-supervisor complete, control dir on ext4", "complete", ours)
	t := reportRow(b, section, "proxy-supervisor complete, control dir on tmpfs (medium: Memory)", "complete-tmpfs", oursTmpfs)
	reportRow(b, section, "proxy-supervisor complete, ext4, "+untunedName, "complete-untuned", oursUntuned)
	reportRow(b, section, "baseline: poll-then-curl script (curl readiness loop + curl POST /quitquitquit)", "curl", base)
	if len(agent) > 0 {
		reportRow(b, section, "baseline: pilot-agent request POST quitquitquit", "pilot-agent", agent)
	}
	reportTarget("completion", "`complete` start to supervisor exit, p99, ext4 (as shipped)", fmt.Sprintf("%.2f ms", d.p99), "<= 10 ms", d.p99 <= 10)
	reportTarget("completion", "`complete` start to supervisor exit, p99, tmpfs (as shipped)", fmt.Sprintf("%.2f ms", t.p99), "<= 10 ms", t.p99 <= 10)
}

// --- 6. drain ---

// BenchmarkDrain times, with a ready supervisor (--drain-min 0s) and
// `proxy-supervisor prestop` already blocked in the drain, from the app
// closing its last listening port to prestop's exit. In the first samples the
// baseline preStop loop runs alongside, started at a random phase up to 1 s
// before the close, and watches the same close: netstat every second until no
// TCP socket of anything but Envoy (and our supervisor's health port) is left.
func BenchmarkDrain(b *testing.B) {
	useBenchBins(b)
	benchNeedTool(b, "netstat")
	p := newPod(b)
	n, withBaseline := benchSamples(150), benchSamples(50)
	const loop = `while [ $(netstat -plunt | grep tcp | grep -v envoy | grep -v proxy-sup | wc -l) -ne 0 ]; do sleep 1; done`
	var ours, base []float64
	for range b.N {
		for i := range n {
			dir := filepath.Join(p.dir, "d"+strconv.Itoa(i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			sup := benchSupervise(b, p, nil, dir, []string{"--drain-min", "0s", "--drain-timeout", "20s"})
			benchWaitReady(b, dir, sup)
			ln := p.listen("tcp", "127.0.0.1:8080")
			hook := p.start("prestop", false, nil, bin.supervisor, "prestop", "--control-dir", dir)
			sup.WaitLog(`msg="drain started"`, 10*time.Second)
			var sh *proctest.Proc
			if i < withBaseline {
				sh = p.start("netstat loop", false, nil, "sh", "-c", loop)
				time.Sleep(50*time.Millisecond + rand.N(time.Second))
			} else {
				time.Sleep(20 * time.Millisecond)
			}
			if hook.Exited() || (sh != nil && sh.Exited()) {
				b.Fatalf("returned before the port closed:\nprestop: %s\nsupervisor:\n%s", hook.Out.String(), sup.Out.String())
			}
			closed := time.Now()
			ln.Close()
			if code := hook.Exit(10 * time.Second); code != 0 {
				b.Fatalf("prestop exit %d:\n%s\n%s", code, hook.Out.String(), sup.Out.String())
			}
			ours = append(ours, millis(hook.Ended().Sub(closed)))
			if sh != nil {
				if code := sh.Exit(10 * time.Second); code != 0 {
					b.Fatalf("netstat loop exit %d:\n%s", code, sh.Out.String())
				}
				base = append(base, millis(sh.Ended().Sub(closed)))
			}
			sup.Kill()
		}
	}
	b.ReportMetric(0, "ns/op")
	d := reportRow(b, "drain: app's last port closed to preStop's end", "proxy-supervisor prestop", "prestop", ours)
	reportRow(b, "drain: app's last port closed to preStop's end", "baseline: netstat -plunt loop, sleep 1", "netstat", base)
	// The drained condition must hold for the drain's quiet period before
	// the drain ends; the target is 50 ms past it.
	target := millis(drain.DefaultQuiet + 50*time.Millisecond)
	reportTarget("drain", "port closed to `prestop` exit, p99", fmt.Sprintf("%.2f ms", d.p99), fmt.Sprintf("<= %.0f ms", target), d.p99 <= target)
}
