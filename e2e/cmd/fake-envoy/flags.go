package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/e2e/fakeenvoy"
)

// config is the command line: Envoy's own options, parsed the way Envoy parses them,
// and the fixture's flags that make the fake behave like a given Envoy.
type config struct {
	adminAddr        string
	adminAddressPath string
	listeners        listenerFlags
	bindDelay        time.Duration
	silentFor        time.Duration
	initDelay        time.Duration
	stayInitializing bool
	drainTimeS       uint32
	drainStrategy    string
	statsFlush       time.Duration
	concurrency      uint32
	configPath       string
	configYAML       string
	adminAddrSet     bool // --admin-addr given: it wins over the bootstrap's admin
	logLevel         string
	mode             string

	crashAfter  time.Duration
	crashAnswer uint64
	exitAfter   time.Duration
	exitCode    int
	configError bool
	hangOnTerm  bool
	orphans     int
	orphanLife  time.Duration
	readyFile   string
	control     string
	version     fakeenvoy.EnvoyVersion
}

const usageHead = `Usage: fake-envoy [ENVOY OPTIONS] [FIXTURE FLAGS]

A stand-in for the envoy binary: Envoy's admin API, start-up phases, drain and
signal behaviour, for proxy-supervisor's end-to-end tests and demo.

Envoy's options are parsed as Envoy parses them (TCLAP): --name VALUE as two
arguments (never --name=VALUE), -c and -l as the only short forms, numbers in
decimal, no option twice except --stats-tag, an unknown option is an error (exit
1), and everything after -- is ignored. The fixture's flags take one or two dashes
and --name=VALUE.

Until it is LIVE, TERM, INT, HUP and USR1 kill it with their default action, as
they kill Envoy before its handlers are installed; USR2 kills it at any time. Once
LIVE, TERM and INT shut it down at once and it exits 0, USR1 reopens the logs and
HUP is logged and ignored. SEGV, ABRT, BUS, ILL and FPE, sent from outside or not,
log a crash with a backtrace and re-raise, so it dies of that signal (139, 134...).

The bootstrap (-c, --config-yaml) gives the admin address and the data listeners,
which forward real traffic: an HTTP connection manager (HTTP/1.1 and h2c on one
port) routes by path to a static cluster's first endpoint or a direct_response;
a tcp_proxy joins its connections to its cluster's. traffic_direction INBOUND
marks the listeners /drain_listeners?inboundonly drains. The admin API is on
the bootstrap's admin.address: a socket_address, or a pipe (a unix socket at
its path). --admin-addr, when given, wins over the bootstrap's admin address.
The bootstrap is read into Envoy's own types (bootstrap v3) and checked by their
rules, as Envoy reads it: one Envoy would reject (an unknown field, a typed_config
without its @type or of a type Envoy does not know, a value out of its rules, a
route to a cluster that does not exist) is an error, exit 1.

FAKE_ENVOY_FLAGS, when set, holds more arguments, split at spaces, taken before
the command line's: the fixture's flags reach a fake whose command line a parent
writes, as pilot-agent writes Envoy's and passes its own environment on.
`

// envFlags is the variable whose arguments come before the command line's.
const envFlags = "FAKE_ENVOY_FLAGS"

// withEnvFlags is the command line with the variable's arguments first.
func withEnvFlags(args []string, env string) []string {
	return append(strings.Fields(env), args...)
}

// optKind is how an Envoy option takes its value.
type optKind int

const (
	switchOpt optKind = iota // no value
	stringOpt                // the next argument
	uintOpt                  // the next argument, a decimal uint32
	multiOpt                 // the next argument; may be repeated
)

// envoyOption is one of the options in Envoy's "Command line options" page.
type envoyOption struct {
	short, long string
	kind        optKind
	arg         string // the value's name in the help
	usage       string
	set         func(c *config, v string) error // nil: accepted and ignored
}

func envoyOptions() []envoyOption {
	uint32To := func(dst func(*config) *uint32) func(*config, string) error {
		return func(c *config, v string) error {
			n, err := parseUint32(v)
			*dst(c) = n
			return err
		}
	}
	str := func(dst func(*config) *string) func(*config, string) error {
		return func(c *config, v string) error { *dst(c) = v; return nil }
	}
	return []envoyOption{
		{"c", "config-path", stringOpt, "path", "bootstrap config, JSON if it ends in .json, else YAML: admin.address (socket_address or pipe) and static_resources' listeners (traffic_direction INBOUND or not; http_connection_manager routes to clusters or direct responses, HTTP/1.1 and h2c; tcp_proxy) and clusters (first endpoint; http2_protocol_options for h2c upstream)", str(func(c *config) *string { return &c.configPath })},
		{"", "config-yaml", stringOpt, "yaml", "bootstrap config as YAML, merged into -c's", str(func(c *config) *string { return &c.configYAML })},
		{"", "mode", stringOpt, "mode", "serve (default), validate (exit 0 at once) or init_only", str(func(c *config) *string { return &c.mode })},
		{"", "admin-address-path", stringOpt, "file", "write the bound admin address to this file", str(func(c *config) *string { return &c.adminAddressPath })},
		{"", "local-address-ip-version", stringOpt, "v4|v6", "", nil},
		{"", "base-id", uintOpt, "uint32", "", nil},
		{"", "use-dynamic-base-id", switchOpt, "", "", nil},
		{"", "base-id-path", stringOpt, "path", "", nil},
		{"", "skip-hot-restart-on-no-parent", switchOpt, "", "", nil},
		{"", "skip-hot-restart-parent-stats", switchOpt, "", "", nil},
		{"", "concurrency", uintOpt, "workers", "worker threads (per-worker stats split the connections); 0 means 1", uint32To(func(c *config) *uint32 { return &c.concurrency })},
		{"l", "log-level", stringOpt, "level", "trace, debug, info, warning|warn, error, critical or off", str(func(c *config) *string { return &c.logLevel })},
		{"", "component-log-level", stringOpt, "name:level,...", "", nil},
		{"", "log-format", stringOpt, "format", "", nil},
		{"", "log-format-escaped", switchOpt, "", "", nil},
		{"", "enable-fine-grain-logging", switchOpt, "", "", nil},
		{"", "log-path", stringOpt, "path", "", nil},
		{"", "restart-epoch", uintOpt, "uint32", "", nil},
		{"", "hot-restart-version", switchOpt, "", "print the hot restart version and exit 0", nil},
		{"", "service-cluster", stringOpt, "name", "", nil},
		{"", "service-node", stringOpt, "name", "", nil},
		{"", "service-zone", stringOpt, "name", "", nil},
		{"", "file-flush-interval-msec", uintOpt, "msec", "", nil},
		{"", "file-flush-min-size-kb", uintOpt, "kb", "", nil},
		{"", "drain-time-s", uintOpt, "seconds", "drain time in seconds (default 600)", uint32To(func(c *config) *uint32 { return &c.drainTimeS })},
		{"", "drain-strategy", stringOpt, "strategy", "gradual (default) or immediate", str(func(c *config) *string { return &c.drainStrategy })},
		{"", "parent-shutdown-time-s", uintOpt, "seconds", "", nil},
		{"", "disable-hot-restart", switchOpt, "", "", nil},
		{"", "enable-mutex-tracing", switchOpt, "", "", nil},
		{"", "cpuset-threads", switchOpt, "", "", nil},
		{"", "allow-unknown-fields", switchOpt, "", "", nil},
		{"", "allow-unknown-static-fields", switchOpt, "", "", nil},
		{"", "reject-unknown-dynamic-fields", switchOpt, "", "", nil},
		{"", "ignore-unknown-dynamic-fields", switchOpt, "", "", nil},
		{"", "skip-deprecated-logs", switchOpt, "", "", nil},
		{"", "disable-extensions", stringOpt, "list", "", nil},
		{"", "socket-path", stringOpt, "path", "", nil},
		{"", "socket-mode", stringOpt, "octal", "", nil},
		{"", "enable-core-dump", switchOpt, "", "", nil},
		{"", "stats-tag", multiOpt, "tag:value", "", nil},
	}
}

// parseError is a command line that Envoy refuses (exit 1), already reported.
type parseError struct{ msg string }

func (e *parseError) Error() string { return e.msg }

// errNoServing is a command line that asks for output and exit 0 (--help,
// --version, --hot-restart-version, --mode validate).
var errNoServing = errors.New("no serving")

func parseFlags(args []string, out io.Writer) (*config, error) {
	c := &config{drainTimeS: 600, drainStrategy: "gradual", concurrency: 2, logLevel: "info", mode: "serve"}
	fs := flag.NewFlagSet("fake-envoy", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in Envoy's words below

	fs.StringVar(&c.adminAddr, "admin-addr", "127.0.0.1:15000", "admin API `address`; port 0 picks a free one")
	fs.Var(&c.listeners, "listener", "a data listener, repeatable: name=ADDR[,inbound][,tcp][,stat_prefix=P]; tcp is a plain tcp_proxy (echoes, ignores drains), else an HTTP connection manager answering 200")
	fs.DurationVar(&c.bindDelay, "bind-delay", 0, "keep the admin port unbound (connections refused) for this long")
	fs.DurationVar(&c.silentFor, "silent-for", 0, "after binding, accept admin connections but answer nothing for this long")
	fs.DurationVar(&c.initDelay, "init-delay", 0, "PRE_INITIALIZING for half of this, INITIALIZING for the rest, then LIVE")
	fs.BoolVar(&c.stayInitializing, "stay-initializing", false, "never reach LIVE on its own (like Istio's xDS waiting forever)")
	fs.DurationVar(&c.statsFlush, "stats-flush-interval", 5*time.Second, "how often the lagging server.state gauge is refreshed")
	fs.DurationVar(&c.crashAfter, "crash-after", 0, "die of SIGSEGV after this long (exit status 139)")
	fs.Uint64Var(&c.crashAnswer, "crash-after-answers", 0, "die of SIGSEGV (139) once the listeners have sent this many responses, the last one flushed to its HTTP/1 client whole: a crash at an event, after the client has its answer")
	fs.DurationVar(&c.exitAfter, "exit-after", 0, "exit by itself with --exit-code after this long")
	fs.Func("exit-code", "the code for --exit-after, decimal 0 to 255", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 255 {
			return errors.New("want a decimal code from 0 to 255")
		}
		c.exitCode = n
		return nil
	})
	fs.BoolVar(&c.configError, "config-error", false, "fail like a bad config: log the error and exit 1 at once")
	fs.BoolVar(&c.hangOnTerm, "hang-on-term", false, "acknowledge SIGTERM, SIGINT (from the start) and /quitquitquit but never exit; only SIGKILL ends it")
	fs.IntVar(&c.orphans, "orphans", 0, "at start, fork a child that starts this many grandchildren and exits at once, orphaning them")
	fs.DurationVar(&c.orphanLife, "orphan-life", 0, "how long each orphan lives before it exits")
	fs.StringVar(&c.readyFile, "ready-file", "", "create this `file` once LIVE")
	fs.Func("fake-version", "the Envoy `release` to be, MAJOR.MINOR[.PATCH] (default "+fakeenvoy.DefaultVersion.String()+"), a main-branch build 1.MINOR.0-dev (without 1.MINOR.0's changes), next (main after 1.40), or custom for a build that reports no release (and behaves as the default): /server_info and --version report it, and /drain_listeners does what it does: before 1.28 skip_exit is ignored (envoy#30003); before 1.34 a graceful drain tells every listener's connections to close, inboundonly or not (envoy#35020, envoy#38430); from 1.40 a drain without graceful tells them too, and skip_exit needs no graceful (envoy#47042); next closes a draining listener's HTTP connections, idle or upgraded, in the last third of --drain-time-s", func(v string) error {
		var err error
		c.version, err = fakeenvoy.ParseVersion(v)
		return err
	})
	fs.StringVar(&c.control, "control", "", "unix socket `path` taking fixture commands, one per line: state LIVE|DRAINING|PRE_INITIALIZING|INITIALIZING, silent on|off, slow DURATION (every admin answer that late; 0: none), busy DURATION (the main thread busy that long from the next GET /ready: it and every admin request meanwhile wait for the end; answered then, with how many were held), crash, exit N")

	opts := envoyOptions()
	byName := map[string]*envoyOption{}
	for i := range opts {
		o := &opts[i]
		byName["--"+o.long] = o
		if o.short != "" {
			byName["-"+o.short] = o
		}
	}
	// tclap prints the error and a pointer to the help; Envoy exits 1.
	// Envoy's own checks after parsing are framed the same way.
	refuse := func(arg, msg string) (*config, error) {
		fmt.Fprintf(out, "PARSE ERROR: Argument: %s\n             %s\n\nFor complete USAGE and HELP type: \n   envoy --help\n\n", arg, msg)
		return nil, &parseError{msg}
	}
	var fixture []string
	wantVersion := false
	seen := map[string]bool{}
	values := map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch a {
		case "--":
			i = len(args) // tclap's --ignore_rest: the rest is not parsed
			continue
		case "-h", "--help":
			printUsage(out, fs, opts)
			return nil, errNoServing
		case "--version":
			wantVersion = true // printed once --fake-version is known
			continue
		}
		if o, ok := byName[a]; ok {
			id := "(--" + o.long + ")"
			if o.short != "" {
				id = "-" + o.short + " " + id
			}
			if seen[o.long] && o.kind != multiOpt {
				return refuse(id, "Argument already set!")
			}
			seen[o.long] = true
			if o.kind == switchOpt {
				continue
			}
			if i+1 == len(args) {
				return refuse(id, "Missing a value for this argument!")
			}
			i++
			if o.kind == uintOpt {
				if _, err := parseUint32(args[i]); err != nil {
					return refuse(id, err.Error())
				}
			}
			values[o.long] = append(values[o.long], args[i])
			if o.set != nil {
				o.set(c, args[i])
			}
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		fl := fs.Lookup(name)
		if !strings.HasPrefix(a, "-") || fl == nil || len(name) == 1 {
			// The second line keeps the fixture's own words for a typo in
			// one of its flags.
			what := fmt.Sprintf("flag provided but not defined: %s", a)
			if !strings.HasPrefix(a, "-") {
				what = fmt.Sprintf("unexpected argument %q", a)
			}
			c, err := refuse(a, "Couldn't find match for argument")
			fmt.Fprintf(out, "fake-envoy: %s: neither an Envoy option nor a fixture flag\n", what)
			return c, err
		}
		fixture = append(fixture, a)
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) && i+1 < len(args) {
			i++
			fixture = append(fixture, args[i])
		}
	}
	if err := fs.Parse(fixture); err != nil {
		fmt.Fprintf(out, "fake-envoy: %v\n", err)
		return nil, &parseError{err.Error()}
	}
	if wantVersion {
		fmt.Fprintf(out, "\nenvoy  version: %s\n\n", c.version.Build())
		return nil, errNoServing
	}
	if msg, long := envoyChecks(c, seen, values); msg != "" {
		return refuse("(--"+long+")", msg)
	}
	fs.Visit(func(f *flag.Flag) { c.adminAddrSet = c.adminAddrSet || f.Name == "admin-addr" })
	if seen["hot-restart-version"] {
		fmt.Fprint(out, fakeenvoy.HotRestartVersion())
		return nil, errNoServing
	}
	c.concurrency = max(c.concurrency, 1)
	return c, nil
}

// envoyChecks are the checks Envoy makes once tclap has parsed the command
// line. It returns the first failure in Envoy's words, and the option's name.
func envoyChecks(c *config, seen map[string]bool, values map[string][]string) (msg, long string) {
	checkFailed := func(long, format string, args ...any) (string, string) {
		return fmt.Sprintf(format, args...), long
	}
	if _, err := logLevel(c.logLevel); err != nil {
		return checkFailed("log-level", "error: invalid log level specified '%s'", c.logLevel)
	}
	for _, v := range values["component-log-level"] {
		for _, pair := range strings.Split(v, ",") {
			name, level, ok := strings.Cut(pair, ":")
			if !ok || strings.Contains(level, ":") {
				return checkFailed("component-log-level", "error: component log level not correctly specified '%s'", pair)
			}
			if _, err := logLevel(level); err != nil {
				return checkFailed("component-log-level", "error: invalid log level specified '%s'", level)
			}
			if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
				return checkFailed("component-log-level", "error: invalid component specified '%s'", name)
			}
		}
	}
	if c.mode != "serve" && c.mode != "validate" && c.mode != "init_only" {
		return checkFailed("mode", "error: unknown mode '%s'", c.mode)
	}
	for _, v := range values["local-address-ip-version"] {
		if v != "v4" && v != "v6" {
			return checkFailed("local-address-ip-version", "error: unknown IP address version '%s'", v)
		}
	}
	if seen["use-dynamic-base-id"] && len(values["restart-epoch"]) > 0 {
		if n, _ := parseUint32(values["restart-epoch"][0]); n > 0 {
			return checkFailed("restart-epoch", "error: cannot use --restart-epoch=%d with --use-dynamic-base-id", n)
		}
	}
	if paths := values["socket-path"]; len(paths) == 0 || paths[0] == "" || paths[0][0] != '@' {
		for _, m := range values["socket-mode"] {
			if _, err := strconv.ParseUint(m, 8, 64); err != nil {
				return checkFailed("socket-mode", "error: invalid socket-mode '%s'", m)
			}
		}
	}
	if c.drainStrategy != "gradual" && c.drainStrategy != "immediate" {
		return checkFailed("drain-strategy", "error: unknown drain-strategy '%s'", c.drainStrategy)
	}
	for _, tag := range values["stats-tag"] {
		name, value, ok := strings.Cut(tag, ":")
		switch {
		case !ok:
			return checkFailed("stats-tag", "error: misformatted stats-tag '%s'", tag)
		case name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "":
			return checkFailed("stats-tag", "error: misformatted stats-tag '%s' contains invalid char in '%s'", tag, name)
		case value == "" || strings.Contains(value, "."):
			return checkFailed("stats-tag", "error: misformatted stats-tag '%s' contains invalid char in '%s'", tag, value)
		}
	}
	return "", ""
}

// parseUint32 reads a uint32 the way tclap does, with a C++ stream: decimal
// only, an optional sign (a negative number wraps around, as strtoul's
// does), nothing after the number.
func parseUint32(v string) (uint32, error) {
	if f := strings.Fields(v); len(f) > 1 {
		if _, err := parseUint32(f[0]); err == nil {
			return 0, fmt.Errorf("More than one valid value parsed from string '%s'", v)
		}
	}
	s, neg := strings.TrimLeft(v, " \t\n\v\f\r"), false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s, neg = s[1:], s[0] == '-'
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("Couldn't read argument value from string '%s'", v)
	}
	if neg {
		return -uint32(n), nil
	}
	return uint32(n), nil
}

// printUsage lists Envoy's options and the fixture's flags.
func printUsage(out io.Writer, fs *flag.FlagSet, opts []envoyOption) {
	fmt.Fprint(out, usageHead)
	fmt.Fprintln(out, "\nEnvoy options (those without a description are accepted and ignored):")
	for _, o := range opts {
		name := "--" + o.long
		if o.short != "" {
			name = "-" + o.short + ", " + name
		}
		if o.arg != "" {
			name += " " + o.arg
		}
		fmt.Fprintf(out, "  %s\n", name)
		if o.usage != "" {
			fmt.Fprintf(out, "    \t%s\n", o.usage)
		}
	}
	fmt.Fprintln(out, "\nFixture flags:")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if name != "" {
			name = " " + name
		}
		fmt.Fprintf(out, "  --%s%s\n    \t%s", f.Name, name, usage)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			fmt.Fprintf(out, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(out)
	})
}

// bootstrap reads -c and --config-yaml, as Envoy does before anything else.
// Without either the bootstrap is empty, and the fixture's flags say it all.
func (c *config) bootstrap() (fakeenvoy.Bootstrap, error) {
	var file []byte
	if c.configPath != "" {
		b, err := os.ReadFile(c.configPath)
		if err != nil {
			return fakeenvoy.Bootstrap{}, fmt.Errorf("Invalid path: %s", c.configPath)
		}
		file = b
	}
	return fakeenvoy.ParseBootstrap(file, strings.HasSuffix(c.configPath, ".json"), c.configYAML)
}

// options are the fake's: the bootstrap's admin unless --admin-addr is
// given, and the fixture's listeners before the bootstrap's.
func (c *config) options(log *slog.Logger, boot fakeenvoy.Bootstrap) fakeenvoy.Options {
	admin, pipe := c.adminAddr, ""
	if !c.adminAddrSet {
		if boot.AdminAddr != "" {
			admin = boot.AdminAddr
		}
		pipe = boot.AdminPipe
	}
	return fakeenvoy.Options{
		AdminAddr:        admin,
		AdminPipe:        pipe,
		Listeners:        append(append([]fakeenvoy.Listener(nil), c.listeners...), boot.Listeners...),
		BindDelay:        c.bindDelay,
		SilentFor:        c.silentFor,
		InitDelay:        c.initDelay,
		StayInitializing: c.stayInitializing,
		DrainTime:        time.Duration(c.drainTimeS) * time.Second,
		DrainStrategy:    c.drainStrategy,
		StatsFlush:       c.statsFlush,
		Log:              log,
		Concurrency:      int(c.concurrency),
		ConfigPath:       c.configPath,
		Version:          c.version,
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
	return 0, fmt.Errorf("unknown log level %q", name)
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
