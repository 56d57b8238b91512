// Command proxy-supervisor is the entrypoint of a pod's proxy container. It
// runs Envoy (or pilot-agent) as its child and owns the pod's proxy lifecycle:
//
//	init    install DIR              copy this binary into the shared volume
//	start   supervise -- envoy ...   fork the proxy, poll its admin API every
//	                                 10 ms until ready; serve readiness
//	        wait                     (postStart) hold the app until ready
//	app     exec --name job -- job   wait for ready (long-poll), run the job,
//	                                 record its exit durably, poke the socket
//	done    complete, or exec's end  every peer completed -> stop the proxy,
//	                                 exit with the job's code
//	delete  prestop / SIGTERM     -> readiness 503, drain Envoy's listeners,
//	                                 wait for the app's ports to close and
//	                                 Envoy's connections to reach zero (bounded)
//	stop    /quitquitquit -> SIGTERM to the group -> SIGKILL at --stop-timeout
//
// The command table (commands) is this timeline, moment by moment; status
// and version answer at any time. The same binary is the client the app
// container uses (wait, exec, complete, prestop, status).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	// First of the project's packages to be initialised: it holds the
	// signals that supervise and exec answer from then on.
	_ "github.com/proxy-supervisor/proxy-supervisor/cmd/proxy-supervisor/internal/earlysig"
)

func main() {
	tuneRuntime(os.Getenv)
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// tuneRuntime sizes the Go runtime for a process that idles beside a proxy.
// GOGC=25 lowers the runtime's minimum heap
// goal from 4 MB to 1 MB: the live heap is a few hundred kB, and at the
// default the heap would sit at 4 MB of mostly garbage. A soft memory limit
// was tried instead and rejected: the runtime's own memory fills a small
// limit, and the collector then runs without pause (27% of a CPU under load,
// p99 of /healthz/ready 9 ms instead of 0.6 ms; docs/benchmarks-history.md).
// GOGC in the environment still overrides it. Memory profiling is off:
// nothing reads the profile, and its buckets are never freed (1.4 MB of
// them after one 5 s wrk burst on /healthz/ready).
func tuneRuntime(env func(string) string) {
	runtime.MemProfileRate = 0
	if env("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// oneP gives the runtime one P from here on, unless GOMAXPROCS in the
// environment says otherwise. One P is plenty for a process that idles
// (blocking syscalls release it) and saves the per-P caches and threads.
// It stops the world, 0.15–0.2 ms at a process's start, so the long-lived
// commands call it only when their start is over (supervise once its flags
// are read, exec once COMMAND runs), and the short-lived ones never do.
func oneP(env func(string) string) {
	if env("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}

const gcPercent = 25

// command is one subcommand: when in the pod's life it runs, what it does,
// and how; run returns the process's exit code.
type command struct {
	when  string // the moment of the package doc's timeline
	name  string
	about string
	run   func(args []string, env func(string) string, stdout, stderr io.Writer) int
}

// anyTime is the moment of the commands that answer whenever they are asked.
const anyTime = "any time"

// commands are the pod's timeline, as the package's doc comment draws it:
// each moment's commands in the order they run; then those that answer at
// any time. The stop has no command: it is the supervisor's own act.
func commands() []command {
	return []command{
		{"init", "install", "copy this binary into DIR for app containers (an init container)", runInstall},
		{"start", "supervise", "run the proxy as a child and own its lifecycle (the proxy container's command)", runSupervise},
		{"start", "wait", "exit 0 once the proxy is ready (postStart hooks, start scripts)", runWait},
		{"app", "exec", "wait for the proxy, run COMMAND, record its completion, exit with its code", runExec},
		{"done", "complete", "record this peer's completion", runComplete},
		{"delete", "prestop", "start the drain and block until it is done (the proxy's preStop hook)", runPrestop},
		{anyTime, "status", "print the supervisor's state as JSON", runStatus},
		{anyTime, "version", "print the version (also: proxy-supervisor --version)", runVersion},
	}
}

// run dispatches the command line the way go and kubectl do: help on
// stdout with exit 0 when asked for (-h, --help, help [COMMAND]), on stderr
// with exit 2 when no command was given; --version as the version command.
func run(args []string, env func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		if len(args) > 1 {
			return run([]string{args[1], "--help"}, env, stdout, stderr)
		}
		usage(stdout)
		return 0
	case "-version", "--version":
		return runVersion(args[1:], env, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], env, stdout, stderr)
		}
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "proxy-supervisor: unknown flag %s before the command (--help lists the commands, --version prints the version)\n", args[0])
		return 2
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	fmt.Fprintf(stderr, "proxy-supervisor: unknown command %q%s (--help lists the commands)\n", args[0], didYouMean("", args[0], names))
	return 2
}

// usage lists the commands by their moment in the pod's life.
func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: proxy-supervisor COMMAND [flags]\n\nCommands, by when they run in a pod's life:")
	when := ""
	for _, c := range commands() {
		moment := ""
		if c.when != when {
			moment, when = c.when, c.when
		}
		fmt.Fprintf(w, "  %-9s %-10s %s\n", moment, c.name, c.about)
	}
	fmt.Fprintln(w, "\nRun 'proxy-supervisor COMMAND --help' for a command's flags.")
}

// parseOrExit parses a command's flags. It returns done=true with the exit
// code when the command must end here: 0 after --help, 2 after bad usage.
func parseOrExit(f *flags, args []string, env func(string) string, stdout, stderr io.Writer) (rest []string, code int, done bool) {
	rest, err := f.parse(args, env)
	for _, w := range f.warnings {
		fmt.Fprintln(stderr, w)
	}
	if errors.Is(err, flag.ErrHelp) {
		f.usage(stdout)
		return nil, 0, true
	}
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: %v\n", err)
		return nil, 2, true
	}
	return rest, 0, false
}

// parseFlagsOnly is parseOrExit for a command that takes no arguments.
func parseFlagsOnly(f *flags, args []string, env func(string) string, stdout, stderr io.Writer) (code int, done bool) {
	rest, code, done := parseOrExit(f, args, env, stdout, stderr)
	if done {
		return code, true
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "proxy-supervisor: %s: unexpected argument %q\n", f.fs.Name(), rest[0])
		return 2, true
	}
	return 0, false
}
