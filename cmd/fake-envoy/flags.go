package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/fakeenvoy"
)

// config is the command line. The Envoy flags a supervisor passes through (-c,
// --disable-hot-restart, …) are accepted so that a real command line runs unchanged.
type config struct {
	adminAddr        string
	adminAddressPath string
	listeners        listenerFlags
	bindDelay        time.Duration
	silentFor        time.Duration
	initDelay        time.Duration
	stayInitializing bool
	drainTimeS       int
	drainStrategy    string
	statsFlush       time.Duration
	concurrency      int
	configPath       string
	logLevel         string

	crashAfter  time.Duration
	exitAfter   time.Duration
	exitCode    int
	configError bool
	hangOnTerm  bool
	orphans     int
	orphanLife  time.Duration
	readyFile   string
	control     string
}

const usageHead = `Usage: fake-envoy [flags]

A stand-in for the envoy binary: Envoy's admin API, start-up phases, drain and
signal behaviour, for proxy-supervisor's end-to-end tests and demo. Flags take one
or two dashes. Envoy flags that do not matter here (--disable-hot-restart,
--service-node, …) are accepted and ignored.

Before it is LIVE, TERM, INT, HUP and USR1 kill it with their default action, as
they kill Envoy before its handlers are installed; USR2 kills it at any time. Once
LIVE, TERM and INT shut it down at once and it exits 0, USR1 reopens the logs and
HUP is logged and ignored.

Flags:
`

func parseFlags(args []string, out io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("fake-envoy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { printUsage(out, fs) }

	fs.StringVar(&c.adminAddr, "admin-addr", "127.0.0.1:15000", "admin API `address`; port 0 picks a free one")
	fs.StringVar(&c.adminAddressPath, "admin-address-path", "", "write the bound admin address to this `file`, as Envoy does")
	fs.Var(&c.listeners, "listener", "a data listener, repeatable: name=ADDR[,inbound][,tcp][,stat_prefix=P]; tcp is a plain tcp_proxy (echoes, ignores drains), else an HTTP connection manager answering 200")
	fs.DurationVar(&c.bindDelay, "bind-delay", 0, "keep the admin port unbound (connections refused) for this long")
	fs.DurationVar(&c.silentFor, "silent-for", 0, "after binding, accept admin connections but answer nothing for this long")
	fs.DurationVar(&c.initDelay, "init-delay", 0, "PRE_INITIALIZING for half of this, INITIALIZING for the rest, then LIVE")
	fs.BoolVar(&c.stayInitializing, "stay-initializing", false, "never reach LIVE on its own (like Istio's xDS waiting forever)")
	fs.IntVar(&c.drainTimeS, "drain-time-s", 600, "drain time in `seconds`")
	fs.StringVar(&c.drainStrategy, "drain-strategy", "gradual", "gradual or immediate")
	fs.DurationVar(&c.statsFlush, "stats-flush-interval", 5*time.Second, "how often the lagging server.state gauge is refreshed")
	fs.IntVar(&c.concurrency, "concurrency", 2, "worker threads (per-worker stats split the connections)")
	fs.StringVar(&c.configPath, "config-path", "", "shown in /server_info only")
	fs.StringVar(&c.configPath, "c", "", "shorthand for --config-path")
	fs.StringVar(&c.logLevel, "log-level", "info", "trace, debug, info, warning, error, critical or off")
	fs.StringVar(&c.logLevel, "l", "info", "shorthand for --log-level")

	fs.DurationVar(&c.crashAfter, "crash-after", 0, "die of SIGSEGV after this long (exit status 139)")
	fs.DurationVar(&c.exitAfter, "exit-after", 0, "exit by itself with --exit-code after this long")
	fs.IntVar(&c.exitCode, "exit-code", 0, "the code for --exit-after")
	fs.BoolVar(&c.configError, "config-error", false, "fail like a bad config: log the error and exit 1 at once")
	fs.BoolVar(&c.hangOnTerm, "hang-on-term", false, "acknowledge SIGTERM, SIGINT (from the start) and /quitquitquit but never exit; only SIGKILL ends it")
	fs.IntVar(&c.orphans, "orphans", 0, "at start, fork a child that starts this many grandchildren and exits at once, orphaning them")
	fs.DurationVar(&c.orphanLife, "orphan-life", 0, "how long each orphan lives before it exits")
	fs.StringVar(&c.readyFile, "ready-file", "", "create this `file` once LIVE")
	fs.StringVar(&c.control, "control", "", "unix socket `path` taking fixture commands, one per line: state LIVE|DRAINING|PRE_INITIALIZING|INITIALIZING, silent on|off, crash, exit N")

	var ignored string
	var ignoredBool bool
	for _, name := range []string{"config-yaml", "service-cluster", "service-node", "service-zone",
		"local-address-ip-version", "component-log-level", "log-format", "log-path", "base-id",
		"restart-epoch", "parent-shutdown-time-s", "file-flush-interval-msec"} {
		fs.StringVar(&ignored, name, "", ignoredUsage)
	}
	for _, name := range []string{"disable-hot-restart", "allow-unknown-static-fields",
		"reject-unknown-dynamic-fields", "use-dynamic-base-id", "cpuset-threads", "enable-core-dump"} {
		fs.BoolVar(&ignoredBool, name, false, ignoredUsage)
	}

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// fs.Parse has reported its own errors; these are reported here.
	fail := func(err error) (*config, error) {
		fmt.Fprintf(out, "PARSE ERROR: %v\n", err)
		return nil, err
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if c.drainStrategy != "gradual" && c.drainStrategy != "immediate" {
		return fail(fmt.Errorf("--drain-strategy %q: want gradual or immediate", c.drainStrategy))
	}
	if _, err := logLevel(c.logLevel); err != nil {
		return fail(err)
	}
	return c, nil
}

const ignoredUsage = "accepted for Envoy compatibility, ignored"

// printUsage is flag.PrintDefaults with two dashes and the ignored Envoy flags folded
// into one line.
func printUsage(out io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(out, usageHead)
	var ignored []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == ignoredUsage {
			ignored = append(ignored, "--"+f.Name)
			return
		}
		dashes := "--"
		if len(f.Name) == 1 {
			dashes = "-"
		}
		name, usage := flag.UnquoteUsage(f)
		if name != "" {
			name = " " + name
		}
		fmt.Fprintf(out, "  %s%s%s\n    \t%s", dashes, f.Name, name, usage)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			fmt.Fprintf(out, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(out)
	})
	fmt.Fprintf(out, "\nAccepted for Envoy compatibility and ignored: %s\n", strings.Join(ignored, " "))
}

func (c *config) options(log *slog.Logger) fakeenvoy.Options {
	return fakeenvoy.Options{
		AdminAddr:        c.adminAddr,
		Listeners:        c.listeners,
		BindDelay:        c.bindDelay,
		SilentFor:        c.silentFor,
		InitDelay:        c.initDelay,
		StayInitializing: c.stayInitializing,
		DrainTime:        time.Duration(c.drainTimeS) * time.Second,
		DrainStrategy:    c.drainStrategy,
		StatsFlush:       c.statsFlush,
		Log:              log,
		Concurrency:      c.concurrency,
		ConfigPath:       c.configPath,
		HangOnQuit:       c.hangOnTerm,
	}
}

func logLevel(name string) (slog.Level, error) {
	switch name {
	case "trace", "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warning", "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	case "critical":
		return fakeenvoy.LevelCritical, nil
	case "off":
		return fakeenvoy.LevelCritical + 1, nil
	}
	return 0, fmt.Errorf("--log-level %q: unknown level", name)
}

// listenerFlags is the repeatable --listener.
type listenerFlags []fakeenvoy.Listener

func (l *listenerFlags) String() string {
	var parts []string
	for _, x := range *l {
		parts = append(parts, x.Name+"="+x.Addr)
	}
	return strings.Join(parts, " ")
}

func (l *listenerFlags) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want name=ADDR[,inbound][,tcp][,stat_prefix=P], got %q", v)
	}
	fields := strings.Split(rest, ",")
	x := fakeenvoy.Listener{Name: name, Addr: fields[0]}
	for _, f := range fields[1:] {
		switch {
		case f == "inbound":
			x.Inbound = true
		case f == "tcp":
			x.TCP = true
		case strings.HasPrefix(f, "stat_prefix="):
			x.StatPrefix = strings.TrimPrefix(f, "stat_prefix=")
		default:
			return fmt.Errorf("listener %s: unknown option %q", name, f)
		}
	}
	*l = append(*l, x)
	return nil
}
