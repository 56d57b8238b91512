package main

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/cmd/proxy-supervisor/internal/earlysig"
	"github.com/proxy-supervisor/proxy-supervisor/internal/logbuf"
	"github.com/proxy-supervisor/proxy-supervisor/internal/memtrim"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
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

// runSupervise is the proxy container's command: subscribe to the stop
// signals, read and check the flags, set up the log, then supervise until
// the proxy has exited.
func runSupervise(args []string, env func(string) string, stdout, stderr io.Writer) int {
	// First of all: a SIGTERM during the start must be the supervisor's to
	// answer (143), never Go's default (exit 2 in PID 1); earlysig has held
	// what came since the packages' initialisation. Never stopped: a
	// signal between a Stop and the process's exit would meet that default
	// and replace the decided exit code.
	sigs := supervise.Subscribe()
	earlysig.Hand(sigs.Held)
	f, o := superviseFlags()
	cmdline, code, done := parseOrExit(f, args, env, stdout, stderr)
	if done {
		return code
	}
	cfg, err := o.config(f, cmdline, env)
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: supervise: %v\n", err)
		return 2
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
	cfg.Log = newLogger(logw, o.logFormat.val, o.logLevel.val)
	cfg.Signals = sigs
	cfg.Build = binaryBuild()
	o.logStart(cfg.Log)
	return supervised(cfg, *o.install)
}

// superviseOptions are supervise's flags, as parsed; config checks them
// and has supervise derive the bounds they leave open.
type superviseOptions struct {
	adminURL, extraReady   *httpURL
	healthAddr             listenAddr
	controlDir, peerSpec   *string
	restart, onFailure     *choice
	native, strict         *bool
	drainMin, drainTimeout *time.Duration
	drainDelay             *time.Duration
	stopTimeout, quitGrace *time.Duration
	gracePeriod, hungAfter *time.Duration
	appPorts               portList
	peerRestart            peerRestarts
	proxyUID               optionalUID
	allowed                uidList
	inbound, hcFail        *bool
	readyUntilHints        *bool
	envoyDeath             *bool
	termLog                *string
	logFormat, logLevel    *choice
	install                *string

	// Set by config, for logStart.
	policy peers.Restart
	bounds supervise.Bounds
	istio  istioSettings
}

func superviseFlags() (*flags, *superviseOptions) {
	f := newFlags("supervise", "supervise [flags] -- COMMAND [ARG...]",
		"Runs COMMAND (envoy, or pilot-agent proxy sidecar) as a child in its own process group and owns its lifecycle.")
	o := &superviseOptions{healthAddr: listenAddr{":15022", 15022}, proxyUID: optionalUID(-1)}
	o.adminURL = newHTTPURL("http://127.0.0.1:15000", "Envoy's admin API in the pod", true)
	f.fs.Var(o.adminURL, "admin-url", "`URL` of Envoy's admin API, http://HOST:PORT, or unix:///PATH for one on a unix socket (admin.address.pipe), which other containers cannot reach: readiness, drain, stop and connection counts come from it")
	f.fs.Var(&o.healthAddr, "health-addr", "`HOST:PORT` of the TCP health server (/healthz/ready, /healthz/live, /metrics); empty disables it")
	o.controlDir = controlDirFlag(f, "the shared emptyDir `DIR`: sock/control.sock and the completion records in peers/")
	o.peerSpec = f.text("peers", "1", "N|NAME,...", "how many app containers must report completion, or a comma list of their names")
	o.restart = &choice{string(peers.Never), restartNames()}
	f.fs.Var(o.restart, "restart-policy", "the pod's restartPolicy: Never (any exit of the app is final; a failure stops the proxy with the app's code), OnFailure (only success ends it), Always (a Deployment's: no exit of the app stops the proxy)")
	f.fs.Var(&o.peerRestart, "peer-restart", "each app container's own restartPolicy and restartPolicyRules, which the kubelet follows instead of the pod's and the downward API cannot give: entries NAME=POLICY[,RULE...] separated by ';', POLICY Never, OnFailure or Always, each RULE ACTION:In(CODE,...) or ACTION:NotIn(CODE,...) with ACTION Restart or RestartAllContainers, such as job=Never,Restart:In(42); a peer without an entry follows --restart-policy")
	o.onFailure = &choice{"", []string{"exit", "wait"}}
	f.fs.Var(o.onFailure, "on-peer-failure", "deprecated: exit is --restart-policy Never, wait is OnFailure; an error when the two disagree")
	o.native = f.fs.Bool("native-sidecar", false, "run as a native sidecar (initContainers, restartPolicy Always): completion does not end the supervisor; SIGTERM does, at once when the app has gone, and preStop returns once the drain has started")
	o.strict = f.fs.Bool("strict-ready", false, "also require CDS and LDS updates and started workers before ready, as pilot-agent does (for xDS-fed Envoy)")
	o.drainMin = f.fs.Duration("drain-min", 5*time.Second, "the shortest drain; skipped when every peer has completed, and under --native-sidecar but for a restart of the sidecar while the app runs")
	o.drainTimeout = f.fs.Duration("drain-timeout", 20*time.Second, "the longest drain; when not given, --grace-period derives it")
	o.drainDelay = f.fs.Duration("drain-delay", defaultDrainDelay, "from the drain's start to its close hints (/drain_listeners): readiness turns 503 at once and the listeners keep accepting, while the pod leaves its clients' endpoints; ends early once the app listens on no port. Shorter than the drain's bound")
	o.stopTimeout = f.fs.Duration("stop-timeout", 5*time.Second, "from the stop request (/quitquitquit) to SIGKILL of the proxy's group")
	o.quitGrace = f.fs.Duration("quit-grace", time.Second, "how long /quitquitquit gets before SIGTERM to the proxy's group")
	o.gracePeriod = f.fs.Duration("grace-period", 0, "the pod's terminationGracePeriodSeconds: without --drain-timeout the drain's bound is this less --stop-timeout and 5s; with it, a warning when the bounds do not fit. It also bounds the wait of a peer that the kubelet stopped for the pod's termination to reach the proxy (0 there: Kubernetes' default, 30s)")
	f.fs.Var(&o.appPorts, "app-ports", "allowlist of the app's ports; when set, only these count as the app's (use it when other sidecars listen too)")
	f.fs.Var(&o.proxyUID, "proxy-uid", "uid of the proxy; listening sockets it owns are the proxy's (1337 under Istio)")
	f.fs.Var(&o.allowed, "allowed-uids", "comma list of uids that may use the control socket and own completion records; empty allows all")
	o.inbound = f.fs.Bool("drain-inbound-only", true, "drain only inbound listeners (sidecars); false drains every listener")
	o.hcFail = f.fs.Bool("drain-healthcheck-fail", false, "also POST /healthcheck/fail at drain (edge proxies health-checked through Envoy); it closes outbound connections too")
	o.readyUntilHints = f.fs.Bool("drain-ready-until-hints", false, "while draining, keep /healthz/ready as before the drain until the close hints have gone out (Envoy Gateway's order): a Cilium before 1.19 cuts a not-ready terminating pod's connections before any hint")
	o.envoyDeath = f.fs.Bool("fail-on-envoy-death", false, "exit 1 when the child exits 0 without being asked to stop (pilot-agent exits 0 when Envoy crashes)")
	o.extraReady = newHTTPURL("", readinessEndpoint, false)
	f.fs.Var(o.extraReady, "extra-ready-url", "an http:// `URL` that must also answer 200 before the proxy is ready, such as pilot-agent's http://127.0.0.1:15020/healthz/ready; empty: none")
	o.hungAfter = f.fs.Duration("hung-after", 30*time.Second, "/healthz/live fails once a proxy that was ready has not answered its admin API for this long (a hung Envoy); 0 keeps it live")
	o.termLog = f.fs.String("termination-log", supervise.DefaultTerminationLog, "`FILE` that gets a one-line summary of the exit (code, what decided it, start to ready, decision to exit): the container's terminationMessagePath; empty writes none. Never created, and never delays the exit by more than 100ms")
	o.logFormat = &choice{"text", []string{"text", "json"}}
	f.fs.Var(o.logFormat, "log-format", "log format: text or json")
	o.logLevel = &choice{"info", []string{"debug", "info", "warn", "error"}}
	f.fs.Var(o.logLevel, "log-level", "the least severe lines logged: debug, info, warn or error")
	o.install = f.fs.String("install", "", "copy this binary into `DIR` (as install DIR does) before the proxy starts, so that a native sidecar's postStart wait returns only once the app containers can run it: no install init container; empty: none")
	return f, o
}

// config checks the flags and the command line, derives the drain's
// bounds, and returns the supervisor's config (without its log and
// signals). Its errors are bad usage.
func (o *superviseOptions) config(f *flags, cmdline []string, env func(string) string) (supervise.Config, error) {
	if len(cmdline) == 0 {
		return supervise.Config{}, usagef("no COMMAND given: supervise [flags] -- COMMAND [ARG...]")
	}
	if p := o.healthAddr.port; p != 0 && p == o.adminURL.url.Port() {
		return supervise.Config{}, usagef("--health-addr: port %d is Envoy's admin port (--admin-url)", p)
	}
	count, names, err := peers.ParsePeers(*o.peerSpec)
	if err != nil {
		return supervise.Config{}, err
	}
	for _, name := range o.peerRestart.names() {
		if len(names) > 0 && !slices.Contains(names, name) {
			return supervise.Config{}, usagef("--peer-restart: peer %q is not one of --peers %s", name, strings.Join(names, ","))
		}
	}
	if o.policy, err = restartPolicy(o.restart.val, f.given("restart-policy", env), o.onFailure.val); err != nil {
		return supervise.Config{}, err
	}
	if err := o.deriveBounds(f, env); err != nil {
		return supervise.Config{}, err
	}
	return supervise.Config{
		Command:     cmdline,
		AdminURL:    o.adminURL.url,
		StrictReady: *o.strict,
		ExtraReady:  o.extraReady.url,
		HealthAddr:  o.healthAddr.addr,
		ControlDir:  *o.controlDir,
		AllowedUIDs: o.allowed,
		Policy: peers.Policy{
			Count:   count,
			Names:   names,
			Restart: o.policy,
			Native:  *o.native,
			Peers:   o.peerRestart,
		},
		QuitGrace:            o.bounds.QuitGrace,
		StopTimeout:          o.bounds.StopTimeout,
		DrainMin:             o.bounds.DrainMin,
		DrainTimeout:         o.bounds.DrainTimeout,
		GracePeriod:          o.bounds.GracePeriod,
		DrainDelay:           o.bounds.DrainDelay,
		DrainInboundOnly:     *o.inbound,
		DrainHealthcheckFail: *o.hcFail,
		DrainReadyUntilHints: *o.readyUntilHints,
		ProxyUID:             int(o.proxyUID),
		AppPorts:             o.appPorts,
		FailOnEnvoyDeath:     *o.envoyDeath,
		HungAfter:            o.bounds.HungAfter,
		TerminationLog:       *o.termLog,
	}, nil
}

// deriveBounds reads Istio's knobs, then has supervise.NewBounds derive
// the bounds that the flags, as given, leave open and check them all.
func (o *superviseOptions) deriveBounds(f *flags, env func(string) string) error {
	var err error
	if o.istio, err = istioDrain(env); err != nil {
		return err
	}
	given := supervise.Given{
		DrainMin:     f.given("drain-min", env),
		DrainTimeout: f.given("drain-timeout", env),
		DrainDelay:   f.given("drain-delay", env),
	}
	o.bounds, err = supervise.NewBounds(supervise.Bounds{
		DrainMin:     *o.drainMin,
		DrainTimeout: *o.drainTimeout,
		DrainDelay:   *o.drainDelay,
		StopTimeout:  *o.stopTimeout,
		QuitGrace:    *o.quitGrace,
		GracePeriod:  *o.gracePeriod,
		HungAfter:    *o.hungAfter,
	}, given, o.istio.min)
	if err != nil {
		return usagef("%v", err)
	}
	return nil
}

// newLogger is the supervisor's logger. JSON gives a duration as its string
// ("413ms"), as text does: slog's JSON would write unit-less nanoseconds.
func newLogger(w io.Writer, format, level string) *slog.Logger {
	l := slog.LevelInfo
	switch level {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logStart logs what the flags left to say: a deprecated flag, the bounds
// derived, and bounds that do not fit together.
func (o *superviseOptions) logStart(log *slog.Logger) {
	if o.onFailure.val != "" {
		log.Warn("--on-peer-failure is deprecated; use --restart-policy", "on_peer_failure", o.onFailure.val, "restart_policy", string(o.policy))
	}
	b := o.bounds
	if b.Derived() {
		log.Info("drain bound derived from the grace period", "grace_period", b.GracePeriod, "stop_timeout", b.StopTimeout, "margin", supervise.GraceMargin, "drain_timeout", b.DrainTimeout)
	}
	if o.istio.min > 0 {
		log.Info("Istio drain settings mapped", "from", o.istio.source, "drain_min", b.DrainMin, "drain_timeout", b.DrainTimeout)
	}
	if b.MinCutShort() {
		log.Warn("--drain-min is longer than --drain-timeout; the drain will end at the timeout", "drain_min", b.DrainMin, "drain_timeout", b.DrainTimeout)
	}
	if !b.FitsGrace() {
		log.Warn("drain and stop bounds do not fit the pod's grace period; the kubelet will SIGKILL first",
			"drain_timeout", b.DrainTimeout, "stop_timeout", b.StopTimeout, "margin", supervise.GraceMargin, "need", b.Need(), "grace_period", b.GracePeriod)
	}
}

// supervised installs the binary into installDir (unless it is ""), runs
// the supervisor until the proxy has exited and returns its exit code.
// The install comes before the proxy starts: a native sidecar's postStart
// wait holds the app until the proxy is ready, so the app never finds the
// directory without the binary.
func supervised(cfg supervise.Config, installDir string) int {
	code := 1
	var s *supervise.Supervisor
	err := installBefore(cfg.Log, installDir)
	if err == nil {
		s, err = supervise.New(cfg)
	}
	if err != nil {
		supervise.WriteFailure(cfg, code, err)
	} else {
		// A load burst must not leave its pages resident for the pod's life.
		stopTrim := memtrim.Start(memtrim.DefaultEvery, memtrim.DefaultSlack)
		code, err = s.Run()
		stopTrim()
	}
	if err != nil {
		cfg.Log.Error("supervise", "err", err, "exit_code", code)
	}
	cfg.Log.Info("supervisor exiting", "exit_code", code)
	return code
}

func installBefore(log *slog.Logger, dir string) error {
	if dir == "" {
		return nil
	}
	dst, err := install(dir)
	if err != nil {
		return fmt.Errorf("--install %s: %w", dir, err)
	}
	log.Info("installed", "path", dst)
	if why := noexec(dir); why != "" {
		log.Warn("the installed binary may not run in the app containers", "why", why)
	}
	return nil
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

// defaultDrainDelay is --drain-delay's default: in the rolling update
// (docs/benchmarks-history.md, Issue 28), 3 s kept a client that follows the
// endpoints 2 s late from every new connection a close hint sent back to
// the deleting pod, at no cost in failed requests or roll time.
const defaultDrainDelay = 3 * time.Second
