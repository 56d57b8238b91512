package kubelettest

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// jobTimeout bounds a pod from its manifest to its final phase (or to the
// state a test waits for): the proxy is ready in well under a second, the
// rest is the kubelet's own pace (sandbox, containers, hooks, status sync)
// on a busy 2-core machine.
const jobTimeout = 90 * time.Second

func TestJobNeverSucceeds(t *testing.T) {
	t.Parallel()
	n := theNode
	n.run(t, podFrom(t, "job.yaml", "never-ok", "/podapp", "get", hello))
	p := n.waitPhase(t, "never-ok", jobTimeout, corev1.PodSucceeded)
	wantExits(t, p, map[string]exited{"install": {0, 0}, "envoy": {0, 0}, "job": {0, 0}})
}

// The app's code ends the proxy with the same code.
func TestJobNeverFails(t *testing.T) {
	t.Parallel()
	n := theNode
	n.run(t, podFrom(t, "job.yaml", "never-fail", "/podapp", "get", hello, "exit", "3"))
	p := n.waitPhase(t, "never-fail", jobTimeout, corev1.PodFailed)
	wantExits(t, p, map[string]exited{"install": {0, 0}, "envoy": {3, 0}, "job": {3, 0}})
}

// The kubelet restarts the failed app in the same pod; the proxy stays for
// the retry and stops after its success.
func TestJobOnFailureRetries(t *testing.T) {
	t.Parallel()
	n := theNode
	n.run(t, podFrom(t, "job-onfailure.yaml", "onfailure", "/podapp", "fail-once", "/tmp/tried", "3", "get", hello))
	p := n.waitPhase(t, "onfailure", jobTimeout, corev1.PodSucceeded)
	wantExits(t, p, map[string]exited{"install": {0, 0}, "envoy": {0, 0}, "job": {0, 1}})
	lastRun(t, p, "job", 3)
}

// A native sidecar, one container that installs the binary itself: the
// app's exit decides the phase, and the kubelet's SIGTERM ends the
// supervisor with 0, after either.
func TestNativeSidecar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		app   []string
		phase corev1.PodPhase
		code  int32
	}{
		{"native-ok", []string{"/podapp", "get", hello}, corev1.PodSucceeded, 0},
		{"native-fail", []string{"/podapp", "get", hello, "exit", "3"}, corev1.PodFailed, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := theNode
			n.run(t, podFrom(t, "job-native-sidecar.yaml", tc.name, tc.app...))
			p := n.waitPhase(t, tc.name, jobTimeout, tc.phase)
			wantExits(t, p, map[string]exited{"envoy": {0, 0}, "job": {tc.code, 0}})
		})
	}
}

// postStart `wait` holds the app until the proxy is ready: the app (not
// wrapped in exec, which waits by itself) sends its request at once and it
// succeeds, though the fake Envoy takes 6 s to become LIVE. The negative
// control, without the hook, must not race the kubelet's pace (a starved
// kubelet can take longer than any delay to start the app): its fake
// Envoy never becomes ready by itself, so the app, which nothing holds,
// always finds the proxy unready and its request fails.
func TestPostStartWaitHoldsApp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		hook  bool
		envoy []string // the fake Envoy's start
		code  int32
	}{
		{"poststart-hold", true, []string{"--init-delay", "6s"}, 0},
		{"poststart-none", false, []string{"--stay-initializing"}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := theNode
			pod := podFrom(t, "job.yaml", tc.name, "/podapp", "get", hello)
			container(pod, "job").Command = []string{"/podapp", "get", hello}
			envoy := container(pod, "envoy")
			envoy.Command = append(envoy.Command, tc.envoy...)
			if !tc.hook {
				envoy.Lifecycle.PostStart = nil
			}
			n.run(t, pod)
			// The app is not wrapped: no completion, and the pod stays
			// Running with the proxy up.
			p := n.waitPod(t, tc.name, jobTimeout, "app finished", func(p *corev1.Pod) bool {
				s := status(p, "job")
				return s != nil && s.State.Terminated != nil
			})
			if p.Status.Phase != corev1.PodRunning || status(p, "envoy").State.Running == nil {
				t.Fatalf("the proxy should run on:\n%s", describe(p))
			}
			if got := status(p, "job").State.Terminated.ExitCode; got != tc.code {
				t.Fatalf("the app exited %d, want %d:\n%s", got, tc.code, describe(p))
			}
			note(t, "pod %s: the app exited %d, the proxy runs on", tc.name, tc.code)
		})
	}
}

// withGracePeriod sets the pod's grace period and the supervisor's
// --grace-period to match.
func withGracePeriod(pod *corev1.Pod, seconds int64) {
	pod.Spec.TerminationGracePeriodSeconds = &seconds
	envoy := container(pod, "envoy")
	for i, a := range envoy.Command {
		if strings.HasPrefix(a, "--grace-period=") {
			envoy.Command[i] = "--grace-period=" + time.Duration(seconds*int64(time.Second)).String()
		}
	}
}

// ready waits for the pod to be Running and Ready (the proxy's readiness
// probe passed) and returns it.
func (n *node) ready(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	return n.waitPod(t, name, jobTimeout, "ready", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// deleteAndWait deletes a running pod, waits for every container to finish
// and returns their statuses and the deletion's time.
func (n *node) deleteAndWait(t *testing.T, p *corev1.Pod, name string, timeout time.Duration) (map[string]criStatus, time.Time) {
	t.Helper()
	ids := containerIDs(t, p)
	delete(ids, "install") // finished long ago
	deleted := time.Now()
	n.delete(name)
	theReport.phase(t, "deleted")
	return n.waitExits(t, ids, timeout), deleted
}

// wantCodes asserts the containers' exit codes after a deletion.
func wantCodes(t *testing.T, got map[string]criStatus, want map[string]int32) {
	t.Helper()
	theReport.codes(t, got)
	for name, code := range want {
		if got[name].ExitCode != code {
			t.Fatalf("exit codes %+v: %s exited %d, want %d", got, name, got[name].ExitCode, code)
		}
	}
}

// On deletion the drain holds the proxy until the app has closed its port:
// the app's preStop keeps it serving for 8 s, then its SIGTERM closes it.
// The supervisor's log says the drain ended by its condition, not at its
// bound: how soon the proxy then exits is the kubelet's pace (it sends
// the SIGTERM that follows the preStop), which a busy node stretches.
func TestDeletionDrainWaitsForAppPort(t *testing.T) {
	t.Parallel()
	n := theNode
	pod := podFrom(t, "deployment.yaml", "drain", "/podapp", "serve", "127.0.0.1:8080")
	container(pod, "web").Lifecycle.PreStop.Exec.Command = []string{"/podapp", "sleep", "8s"}
	n.run(t, pod)
	p := n.ready(t, "drain")
	got, deleted := n.deleteAndWait(t, p, "drain", 60*time.Second)
	wantCodes(t, got, map[string]int32{"envoy": 0, "web": 0})
	web, envoy := got["web"].finished().Sub(deleted), got["envoy"].finished().Sub(deleted)
	d := n.drainLog(t, "drain", "envoy")
	note(t, "after the deletion: the app exited at %s, the drain ended (%s) at %s, the proxy exited at %s",
		web.Round(time.Millisecond), d.end, d.ended().Sub(deleted).Round(time.Millisecond), envoy.Round(time.Millisecond))
	if web < 8*time.Second || envoy < web {
		t.Fatalf("the proxy exited at %s, before the app closed its port (%s, after its 8s preStop)", envoy, web)
	}
	if d.end != "drained" {
		t.Fatalf("the drain ended %q after %s, want drained: the app closed its port at %s", d.end, d.after, web)
	}
}

// An app that never closes its port: the drain ends at its bound (the
// grace period less the stop timeout and the margin), counted from its
// start (the preStop's arrival), and the proxy exits 0 inside the grace
// period, before the kubelet kills the app at its end. Measured from the
// events themselves: a busy kubelet can start the pod's termination
// seconds after the manifest's removal (the proxy once exited 33.1 s after
// it, with a 30 s grace period, and still 0).
func TestDeletionAppNeverClosesPort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		grace int64
		drain time.Duration // the bound derived from the grace period
	}{
		{"drain-bound", 30, 20 * time.Second},
		{"drain-short-grace", 12, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := theNode
			pod := podFrom(t, "deployment.yaml", tc.name, "/podapp", "listen", "127.0.0.1:8080")
			withGracePeriod(pod, tc.grace)
			container(pod, "web").Lifecycle = nil
			n.run(t, pod)
			p := n.ready(t, tc.name)
			grace := time.Duration(tc.grace) * time.Second
			got, deleted := n.deleteAndWait(t, p, tc.name, 2*grace+30*time.Second)
			wantCodes(t, got, map[string]int32{"envoy": 0, "web": 137})
			envoy, web := got["envoy"].finished(), got["web"].finished()
			d := n.drainLog(t, tc.name, "envoy")
			stopping := n.eventAt(t, tc.name, `reason="Killing"`, "Stopping container envoy")
			since := func(at time.Time) time.Duration { return at.Sub(deleted).Round(time.Millisecond) }
			note(t, "after the deletion: the kubelet stopped the proxy at %s, its drain started at %s and ended (%s) %s later (bound %s), the proxy exited at %s, the app was killed at %s (grace %s)",
				since(stopping), since(d.started), d.end, d.after.Round(time.Millisecond), tc.drain, since(envoy), since(web), grace)
			if d.end != "timeout" || d.after < tc.drain {
				t.Fatalf("the drain ended %q after %s: want at its bound %s, the app's port never closing", d.end, d.after, tc.drain)
			}
			if took := envoy.Sub(d.started); took < tc.drain {
				t.Fatalf("the proxy exited %s after its drain started, before the drain's bound %s", took, tc.drain)
			}
			if !envoy.Before(web) {
				t.Fatalf("the proxy exited at %s, after the kubelet killed the app at the grace period's end (%s)", since(envoy), since(web))
			}
		})
	}
}

// drainLog is the first drain the supervisor logged in a container: when
// it started (the preStop's arrival, or the SIGTERM's) and how, and after
// how long, it ended.
type drainLog struct {
	started time.Time
	end     string
	after   time.Duration
}

func (d drainLog) ended() time.Time { return d.started.Add(d.after) }

var (
	drainStartedLine = regexp.MustCompile(`time=(\S+) level=INFO msg="drain started"`)
	drainEndedLine   = regexp.MustCompile(`msg="drain ended" trigger=\S+ end=(\S+) after=(\S+)`)
)

// drainLog reads a deleted pod's drain from its container's log on the node.
func (n *node) drainLog(t *testing.T, pod, container string) drainLog {
	t.Helper()
	logs := n.podLog(t, pod, container)
	m := drainEndedLine.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no drain ended in the log of %s:\n%s", container, logs)
	}
	after, err := time.ParseDuration(m[2])
	if err != nil {
		t.Fatal(err)
	}
	return drainLog{started: logged(t, logs, drainStartedLine), end: m[1], after: after}
}

// eventAt is when the kubelet logged its first event about the pod whose
// line holds every one of subs, by the line's klog header (the node's
// clock, to the microsecond); the test fails without one.
func (n *node) eventAt(t *testing.T, pod string, subs ...string) time.Time {
	t.Helper()
	evs := n.events(t, pod)
	for _, e := range evs {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(e, s) }) {
			// "I1126 23:41:45.740123 ...": no year, the local zone.
			at, err := time.ParseInLocation("0102 15:04:05.000000", e[1:min(len(e), 21)], time.Local)
			if err != nil {
				t.Fatalf("the kubelet's event line %q: %v", e, err)
			}
			return at.AddDate(time.Now().Year(), 0, 0)
		}
	}
	t.Fatalf("no event of pod %s with %q in the kubelet's log: %q", pod, subs, evs)
	return time.Time{}
}

// A Job's pod deleted while the app runs: the kubelet SIGTERMs the app at
// once and the proxy only after its preStop hook. The supervisor must not
// let the app's 143 decide before the hook runs: it exits 0, and the hook
// does not fail (no FailedPreStopHook).
func TestJobDeletedMidRun(t *testing.T) {
	t.Parallel()
	n := theNode
	n.run(t, podFrom(t, "job.yaml", "job-deleted", "/podapp", "sleep", "1h"))
	p := n.waitPod(t, "job-deleted", jobTimeout, "app running", func(p *corev1.Pod) bool {
		s := status(p, "job")
		return s != nil && s.State.Running != nil
	})
	got, _ := n.deleteAndWait(t, p, "job-deleted", 60*time.Second)
	wantCodes(t, got, map[string]int32{"envoy": 0, "job": 143})
	evs := n.events(t, "job-deleted")
	if !slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, `reason="Killing"`) }) {
		t.Fatalf("no Killing event in the kubelet's log for the pod, so its events are not seen: %q", evs)
	}
	for _, e := range evs {
		if strings.Contains(e, "FailedPreStopHook") {
			t.Fatalf("the proxy's preStop hook failed: %s", e)
		}
	}
	note(t, "the proxy exited 0 and the app 143, %d events, none FailedPreStopHook", len(evs))
}

// An app under `exec` that uploads through the proxy right after closing
// its listener, on deletion: the drain sees its port close, then its
// connection to Envoy, and the proxy stays until the upload is done.
func TestDeletionExecAppUploadsAfterClose(t *testing.T) {
	t.Parallel()
	n := theNode
	pod := podFrom(t, "deployment.yaml", "exec-upload", "/podapp", "serve", "127.0.0.1:8080", "get", hello)
	// The Job's app container shows how an exec-wrapped app is set up.
	job := container(podFrom(t, "job.yaml", "x", "/podapp"), "job")
	web := container(pod, "web")
	web.Command = append(beforeDashes(job.Command), web.Command...)
	web.Command[slices.Index(web.Command, "--name=job")] = "--name=web"
	web.Env, web.VolumeMounts = job.Env, job.VolumeMounts
	n.run(t, pod)
	p := n.ready(t, "exec-upload")
	got, deleted := n.deleteAndWait(t, p, "exec-upload", 60*time.Second)
	// 7 would be the upload's failure.
	wantCodes(t, got, map[string]int32{"envoy": 0, "web": 0})
	note(t, "after the deletion: the app uploaded and exited at %s, the proxy at %s",
		got["web"].finished().Sub(deleted).Round(time.Millisecond), got["envoy"].finished().Sub(deleted).Round(time.Millisecond))
}

// Under OnFailure the proxy crashes (the fake Envoy dies of SIGSEGV, 139)
// while the app runs, and the kubelet restarts the proxy container; the
// app's completion, recorded whether or not a supervisor listens at that
// moment, ends the restarted proxy with 0: the pod succeeds, with one
// restart of the proxy and none of the app. The crash comes at events,
// not at times: the fake Envoy dies once it has sent the app its answer
// (the restarted one serves no request, so it never crashes), and the app
// ends once the crashed supervisor has removed its control socket, so
// that the crash is decided before the app's completion exists.
func TestOnFailureProxyCrashMidJob(t *testing.T) {
	t.Parallel()
	n := theNode
	pod := podFrom(t, "job-onfailure.yaml", "crash-mid-job",
		"/podapp", "watch", "/var/run/proxy-supervisor/sock/control.sock", "get", hello, "until-replaced")
	envoy := container(pod, "envoy")
	envoy.Command = append(envoy.Command, "--crash-after-answers", "1")
	n.run(t, pod)
	p := n.waitPhase(t, "crash-mid-job", jobTimeout, corev1.PodSucceeded)
	wantExits(t, p, map[string]exited{"install": {0, 0}, "envoy": {0, 1}, "job": {0, 0}})
	lastRun(t, p, "envoy", 139) // SIGSEGV
	restarted, completed := status(p, "envoy").State.Terminated.StartedAt, status(p, "job").State.Terminated.FinishedAt
	order := "before"
	if restarted.After(completed.Time) {
		order = "after" // the restarted supervisor found the record
	}
	note(t, "the proxy was restarted %s the app completed (to the second: %s, %s)", order, restarted.Format(time.TimeOnly), completed.Format(time.TimeOnly))
}

// Under OnFailure the app's success is recorded first; the proxy then
// ignores every request to stop (the fake Envoy hangs on /quitquitquit and
// SIGTERM) and dies only of the SIGKILL at --stop-timeout (5 s). The
// success decided: the supervisor exits 0, not 137, and the pod succeeds
// without a restart.
func TestOnFailureCompletionThenProxyKilled(t *testing.T) {
	t.Parallel()
	n := theNode
	pod := podFrom(t, "job-onfailure.yaml", "completed-killed", "/podapp", "get", hello)
	envoy := container(pod, "envoy")
	envoy.Command = append(envoy.Command, "--hang-on-term")
	n.run(t, pod)
	p := n.waitPhase(t, "completed-killed", jobTimeout, corev1.PodSucceeded)
	wantExits(t, p, map[string]exited{"install": {0, 0}, "envoy": {0, 0}, "job": {0, 0}})
	// The runtime's times: the kubelet's are to the second.
	got := n.waitExits(t, containerIDs(t, p), 10*time.Second)
	took := got["envoy"].finished().Sub(got["job"].finished())
	note(t, "the proxy ended %s after the app (its stop timeout is 5s)", took.Round(time.Millisecond))
	if took < 4*time.Second {
		t.Fatalf("the proxy ended %s after the app: it was not held to its SIGKILL", took)
	}
}
