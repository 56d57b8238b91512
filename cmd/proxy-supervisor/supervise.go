package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/logbuf"
	"github.com/proxy-supervisor/proxy-supervisor/internal/memtrim"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
	"github.com/proxy-supervisor/proxy-supervisor/internal/supervise"
)

// DefaultControlDir is the shared emptyDir's mount point.
const DefaultControlDir = "/var/run/proxy-supervisor"

// logBuffer bounds the log lines held for a stalled stderr, and logFlush how
// long the last of them may take to go out at exit.
const (
	logBuffer = 256 << 10
	logFlush  = time.Second
)

// graceMargin is what the pod's grace period must hold beyond the drain and
// the stop: time for the preStop hook to start, and the 2 s the kubelet may
// leave after a hook before SIGTERM.
const graceMargin = 5 * time.Second

func runSupervise(args []string, env func(string) string, stdout, stderr io.Writer) int {
	// First of all: a SIGTERM during the start must be the supervisor's to
	// answer (143), never Go's default (exit 2 in PID 1).
	sigs := supervise.Subscribe()
	defer sigs.Stop()
	f := newFlags("supervise", "supervise [flags] -- COMMAND [ARG...]",
		"Runs COMMAND (envoy, or pilot-agent proxy sidecar) as a child in its own process group and owns its lifecycle.")
	adminURL := &httpURL{val: "http://127.0.0.1:15000", what: "Envoy's admin API in the pod", unix: true}
	f.fs.Var(adminURL, "admin-url", "`URL` of Envoy's admin API, http://HOST:PORT, or unix:///PATH for one on a unix socket (admin.address.pipe), which other containers cannot reach: readiness, drain, stop and connection counts come from it")
	healthAddr := listenAddr(":15022")
	f.fs.Var(&healthAddr, "health-addr", "`HOST:PORT` of the TCP health server (/healthz/ready, /healthz/live, /metrics); empty disables it")
	controlDir := controlDirFlag(f, "the shared emptyDir `DIR`: sock/control.sock and the completion records in peers/")
	peerSpec := f.text("peers", "1", "N|NAME,...", "how many app containers must report completion, or a comma list of their names")
	restart := &choice{string(peers.Never), restartNames()}
	f.fs.Var(restart, "restart-policy", "the pod's restartPolicy: Never (any exit of the app is final; a failure stops the proxy with the app's code), OnFailure (only success ends it), Always (a Deployment's: no exit of the app stops the proxy)")
	onFailure := &choice{"", []string{"exit", "wait"}}
	f.fs.Var(onFailure, "on-peer-failure", "deprecated: exit is --restart-policy Never, wait is OnFailure; an error when the two disagree")
	native := f.fs.Bool("native-sidecar", false, "run as a native sidecar (initContainers, restartPolicy Always): completion does not end the supervisor; SIGTERM does, at once when the app has gone, and preStop returns once the drain has started")
	strict := f.fs.Bool("strict-ready", false, "also require CDS and LDS updates and started workers before ready, as pilot-agent does (for xDS-fed Envoy)")
	drainMin := f.fs.Duration("drain-min", 5*time.Second, "the shortest drain; skipped when every peer has completed, and under --native-sidecar but for a restart of the sidecar while the app runs")
	drainTimeout := f.fs.Duration("drain-timeout", 20*time.Second, "the longest drain; when not given, --grace-period derives it")
	stopTimeout := f.fs.Duration("stop-timeout", 5*time.Second, "from the stop request (/quitquitquit) to SIGKILL of the proxy's group")
	quitGrace := f.fs.Duration("quit-grace", time.Second, "how long /quitquitquit gets before SIGTERM to the proxy's group")
	gracePeriod := f.fs.Duration("grace-period", 0, "the pod's terminationGracePeriodSeconds: without --drain-timeout the drain's bound is this less --stop-timeout and 5s; with it, a warning when the bounds do not fit")
	var appPorts portList
	f.fs.Var(&appPorts, "app-ports", "allowlist of the app's ports; when set, only these count as the app's (use it when other sidecars listen too)")
	proxyUID := optionalUID(-1)
	f.fs.Var(&proxyUID, "proxy-uid", "uid of the proxy; listening sockets it owns are the proxy's (1337 under Istio)")
	var allowed uidList
	f.fs.Var(&allowed, "allowed-uids", "comma list of uids that may use the control socket and own completion records; empty allows all")
	inbound := f.fs.Bool("drain-inbound-only", true, "drain only inbound listeners (sidecars); false drains every listener")
	hcFail := f.fs.Bool("drain-healthcheck-fail", false, "also POST /healthcheck/fail at drain (edge proxies health-checked through Envoy); it closes outbound connections too")
	envoyDeath := f.fs.Bool("fail-on-envoy-death", false, "exit 1 when the child exits 0 without being asked to stop (pilot-agent exits 0 when Envoy crashes)")
	extraReady := &httpURL{what: readinessEndpoint}
	f.fs.Var(extraReady, "extra-ready-url", "an http:// `URL` that must also answer 200 before the proxy is ready, such as pilot-agent's http://127.0.0.1:15020/healthz/ready; empty: none")
	hungAfter := f.fs.Duration("hung-after", 30*time.Second, "/healthz/live fails once a proxy that was ready has not answered its admin API for this long (a hung Envoy); 0 keeps it live")
	termLog := f.fs.String("termination-log", supervise.DefaultTerminationLog, "`FILE` that gets a one-line summary of the exit (code, what decided it, start to ready, decision to exit): the container's terminationMessagePath; empty writes none. Never created, and never delays the exit by more than 100ms")
	logFormat := &choice{"text", []string{"text", "json"}}
	f.fs.Var(logFormat, "log-format", "log format: text or json")

	cmdline, code, done := parseOrExit(f, args, env, stdout, stderr)
	if done {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "proxy-supervisor: supervise: %v\n", err)
		return 2
	}
	if len(cmdline) == 0 {
		return fail(usagef("no COMMAND given: supervise [flags] -- COMMAND [ARG...]"))
	}
	admin, err := envoy.NewAdmin(adminURL.val)
	if err != nil {
		return fail(usagef("--admin-url: %v", err))
	}
	healthPort, healthOn := portOf(string(healthAddr))
	if healthOn && healthPort == admin.Port() {
		return fail(usagef("--health-addr: port %d is Envoy's admin port (--admin-url)", healthPort))
	}
	var extra *envoy.ReadyURL
	if extraReady.val != "" {
		if extra, err = envoy.NewReadyURL(extraReady.val); err != nil {
			return fail(usagef("--extra-ready-url: %v", err))
		}
	}
	count, names, err := peers.ParsePeers(*peerSpec)
	if err != nil {
		return fail(err)
	}
	policy, err := restartPolicy(restart.val, f.given("restart-policy", env), onFailure.val)
	if err != nil {
		return fail(err)
	}
	istio, err := istioDrain(env)
	if err != nil {
		return fail(err)
	}
	if *gracePeriod < 0 {
		return fail(usagef("--grace-period: must not be negative"))
	}
	// The grace period bounds the drain unless --drain-timeout is given
	// (docs/design.md, "Bounds").
	derived := *gracePeriod > 0 && !f.given("drain-timeout", env)
	if derived {
		if *drainTimeout, err = drainFromGrace(*gracePeriod, *stopTimeout); err != nil {
			return fail(err)
		}
		if *drainMin > *drainTimeout && !f.given("drain-min", env) {
			*drainMin = *drainTimeout
		}
	}
	// Istio's knobs apply only where ours were not given: a flag or its
	// variable always wins (docs/design.md, "Istio's knobs").
	if istio.min > 0 && !f.given("drain-min", env) {
		*drainMin = istio.min
		// A floor above the default ceiling would be cut short; Istio's
		// user asked for at least that long. A grace period is a ceiling
		// that the kubelet enforces, so it wins.
		if *drainMin > *drainTimeout && !f.given("drain-timeout", env) && !derived {
			*drainTimeout = *drainMin
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"drain-timeout", *drainTimeout}, {"stop-timeout", *stopTimeout}, {"quit-grace", *quitGrace}} {
		if err := positive(d.name, d.v); err != nil {
			return fail(err)
		}
	}
	if *drainMin < 0 {
		return fail(usagef("--drain-min: must not be negative"))
	}
	if *hungAfter < 0 {
		return fail(usagef("--hung-after: must not be negative"))
	}
	if f.checkOnly() {
		return 0
	}
	oneP(env)
	// Logging must never stop the supervisor: a stderr pipe that nobody
	// drains would otherwise block the signal handler, the drain and the
	// stop sequence with it.
	logw := logbuf.New(stderr, logBuffer)
	defer logw.Close(logFlush)
	var h slog.Handler = slog.NewTextHandler(logw, nil)
	if logFormat.val == "json" {
		h = slog.NewJSONHandler(logw, nil)
	}
	log := slog.New(h)
	if onFailure.val != "" {
		log.Warn("--on-peer-failure is deprecated; use --restart-policy", "on_peer_failure", onFailure.val, "restart_policy", string(policy))
	}
	if derived {
		log.Info("drain bound derived from the grace period", "grace_period", *gracePeriod, "stop_timeout", *stopTimeout, "margin", graceMargin, "drain_timeout", *drainTimeout)
	}
	if istio.min > 0 {
		log.Info("Istio drain settings mapped", "from", istio.source, "drain_min", *drainMin, "drain_timeout", *drainTimeout)
	}
	if *drainMin > *drainTimeout {
		log.Warn("--drain-min is longer than --drain-timeout; the drain will end at the timeout", "drain_min", *drainMin, "drain_timeout", *drainTimeout)
	}
	if need := *drainTimeout + *stopTimeout + graceMargin; *gracePeriod > 0 && need > *gracePeriod {
		log.Warn("drain and stop bounds do not fit the pod's grace period; the kubelet will SIGKILL first",
			"drain_timeout", *drainTimeout, "stop_timeout", *stopTimeout, "margin", graceMargin, "need", need, "grace_period", *gracePeriod)
	}

	s, err := supervise.New(supervise.Config{
		Command:     cmdline,
		Admin:       admin,
		StrictReady: *strict,
		ExtraReady:  extra,
		HealthAddr:  string(healthAddr),
		ControlDir:  *controlDir,
		AllowedUIDs: allowed,
		Policy: peers.Policy{
			Count:   count,
			Names:   names,
			Restart: policy,
			Native:  *native,
		},
		QuitGrace:            *quitGrace,
		StopTimeout:          *stopTimeout,
		DrainMin:             *drainMin,
		DrainTimeout:         *drainTimeout,
		DrainInboundOnly:     *inbound,
		DrainHealthcheckFail: *hcFail,
		Owner:                portwatch.Owner{AdminPort: admin.Port(), HealthPort: healthPort, ProxyUID: int(proxyUID), AppPorts: appPorts},
		FailOnEnvoyDeath:     *envoyDeath,
		HungAfter:            *hungAfter,
		Signals:              sigs,
		TerminationLog:       *termLog,
		Log:                  log,
	})
	if err != nil {
		fmt.Fprintf(logw, "proxy-supervisor: supervise: %v\n", err)
		return 1
	}
	// A load burst must not leave its pages resident for the pod's life.
	stopTrim := memtrim.Start(memtrim.DefaultEvery, memtrim.DefaultSlack)
	code, err = s.Run()
	stopTrim()
	if err != nil {
		log.Error("supervise", "err", err, "exit_code", code)
	}
	log.Info("supervisor exiting", "exit_code", code)
	return code
}

func restartNames() []string {
	names := make([]string, len(peers.Restarts))
	for i, r := range peers.Restarts {
		names[i] = string(r)
	}
	return names
}

// restartPolicy resolves --restart-policy and its deprecated alias
// --on-peer-failure (exit is Never, wait is OnFailure). Either alone
// decides; both must agree.
func restartPolicy(restart string, restartGiven bool, onFailure string) (peers.Restart, error) {
	alias := map[string]peers.Restart{"exit": peers.Never, "wait": peers.OnFailure}[onFailure]
	switch {
	case onFailure == "":
		return peers.Restart(restart), nil
	case !restartGiven:
		return alias, nil
	case alias != peers.Restart(restart):
		return "", usagef("--on-peer-failure=%s means --restart-policy %s, which disagrees with --restart-policy %s; drop the deprecated --on-peer-failure", onFailure, alias, restart)
	}
	return alias, nil
}

// minDrain is the shortest drain a grace period may leave: less would end
// every drain before Envoy's listeners have been asked to drain.
const minDrain = time.Second

// drainFromGrace is the drain's bound that the pod's grace period leaves
// after the stop and the margin. A grace period that leaves less than
// minDrain is refused: the kubelet would SIGKILL a proxy that drained at
// all, and a silent clamp would hide that.
func drainFromGrace(grace, stop time.Duration) (time.Duration, error) {
	d := grace - stop - graceMargin
	if d < minDrain {
		return 0, usagef("--grace-period: %v leaves %v to drain after --stop-timeout %v and the %v margin, less than %v; "+
			"give a longer grace period, a shorter --stop-timeout, or --drain-timeout explicitly", grace, max(d, 0), stop, graceMargin, minDrain)
	}
	return d, nil
}
