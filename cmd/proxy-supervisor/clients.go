package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/cmd/proxy-supervisor/internal/earlysig"
	"github.com/proxy-supervisor/proxy-supervisor/internal/app"
	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The app container's commands: their flags here, their work in
// internal/app.

func peerFlags(f *flags) (name, dir *string, trust *uidList) {
	name = f.text("name", control.DefaultPeer, "NAME", "this peer's name; set it literally in each app container's manifest (the downward API cannot give a container its own name)")
	dir = controlDirFlag(f, "the shared emptyDir `DIR` holding sock/control.sock and peers/")
	return name, dir, supervisorUIDs(f)
}

// peer is the app.Peer that the flags name.
func peer(name, dir string, trust uidList) app.Peer {
	return app.Peer{Socket: app.Socket{Dir: dir, Trust: trust}, Name: name}
}

// runExec is an app container's command: check the flags, then run
// COMMAND as the peer (app.Exec).
func runExec(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("exec", "exec [--name NAME] [--timeout DURATION] [--control-dir DIR] -- COMMAND [ARG...]",
		"Marks this peer running, waits until the proxy is ready, runs COMMAND (forwarding signals, reaping orphans), records its completion and exits with its code. If the proxy is not ready within --timeout it records not-ready and exits 69 without running COMMAND. When the record cannot be written (a full or read-only volume), COMMAND still runs and its completion goes over the socket alone.")
	name, dir, trust := peerFlags(f)
	timeout := f.fs.Duration("timeout", 10*time.Minute, "how long to wait for the proxy (Istio's startup budget), and for a supervisor to take a completion that could not be recorded")
	cmdline, code, done := parseOrExit(f, args, env, stdout, stderr)
	if done {
		return code
	}
	if err := checkExec(cmdline, *name, *timeout); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: exec: %v\n", err)
		return 2
	}
	if f.checkOnly() {
		return 0
	}
	// The signals held since the packages' initialisation are exec's.
	return app.Exec(peer(*name, *dir, *trust), cmdline, *timeout, app.Hooks{Held: earlysig.Hand, Started: func() { oneP(env) }}, stderr)
}

// checkExec checks exec's arguments; its errors are bad usage.
func checkExec(cmdline []string, name string, timeout time.Duration) error {
	if len(cmdline) == 0 {
		return errors.New("no COMMAND given: exec [flags] -- COMMAND [ARG...]")
	}
	if err := peers.ValidName(name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	return positive("timeout", timeout)
}

func runComplete(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("complete", "complete [--name NAME] [--exit-code CODE] [--control-dir DIR]",
		"Records this peer's completion durably, then tells the supervisor. It succeeds even when no supervisor is listening: the supervisor reads the record when it starts. When the record cannot be written (a full or read-only volume), the completion goes over the socket alone, and complete waits up to --timeout for a supervisor to take it. Exits 0 once the completion is recorded or taken, 1 when it was neither or the supervisor refused it, 2 on bad usage.")
	name, dir, trust := peerFlags(f)
	var code exitCode
	f.fs.Var(&code, "exit-code", "the peer's exit code, a decimal integer from 0 to 255")
	timeout := f.fs.Duration("timeout", 10*time.Minute, "how long to wait for the supervisor to create peers/ when it has never run in this pod yet, or to take a completion that could not be recorded")
	if c, done := parseFlagsOnly(f, args, env, stdout, stderr); done {
		return c
	}
	if err := peers.ValidName(*name); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: complete: --name: %v\n", err)
		return 2
	}
	if err := positive("timeout", *timeout); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: complete: %v\n", err)
		return 2
	}
	if f.checkOnly() {
		return 0
	}
	return app.Complete(peer(*name, *dir, *trust), int(code), *timeout, stderr)
}

// supervisorUIDs adds --supervisor-uid to a client command.
func supervisorUIDs(f *flags) *uidList {
	var u uidList
	f.fs.Var(&u, "supervisor-uid", "comma list of uids the supervisor may run as besides 0, 1337 (Istio's proxy) and this process's own; a control socket served by any other uid is refused")
	return &u
}

// readinessEndpoint is what --url and --extra-ready-url name.
const readinessEndpoint = "a local proxy's readiness endpoint, such as pilot-agent's http://127.0.0.1:15020/healthz/ready"

func runWait(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("wait", "wait [--timeout DURATION] [--control-dir DIR | --url URL]",
		"Exits 0 once the proxy is ready, or non-zero at the timeout. Fits a postStart hook and an app's start script.")
	timeout := f.fs.Duration("timeout", 60*time.Second, "how long to wait")
	dir := controlDirFlag(f, "the shared emptyDir `DIR` holding sock/control.sock")
	url := newHTTPURL("", readinessEndpoint, false)
	f.fs.Var(url, "url", "an http:// readiness `URL` to poll instead of the control socket (a proxy that is not ours); plain HTTP only")
	trust := supervisorUIDs(f)
	if code, done := parseFlagsOnly(f, args, env, stdout, stderr); done {
		return code
	}
	if err := positive("timeout", *timeout); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: wait: %v\n", err)
		return 2
	}
	// Only flags on the command line conflict. A variable is a default
	// that the other's flag overrides: a container's environment may set
	// PROXY_SUPERVISOR_CONTROL_DIR for every command it runs. From the
	// variables alone, the URL is what wait alone takes.
	byURL := url.url.Raw != ""
	switch {
	case byURL && f.explicit("url") && f.explicit("control-dir"):
		fmt.Fprintln(stderr, "proxy-supervisor: wait: give --control-dir or --url, not both")
		return 2
	case byURL && f.explicit("control-dir"):
		byURL = false // PROXY_SUPERVISOR_URL gives way to --control-dir
	}
	if f.checkOnly() {
		return 0
	}
	if byURL {
		return app.WaitURL(url.url, *timeout, stderr)
	}
	return app.Wait(app.Socket{Dir: *dir, Trust: *trust}, *timeout, stderr)
}

func runPrestop(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("prestop", "prestop [--timeout DURATION] [--control-dir DIR]",
		"Starts the drain (readiness 503, Envoy's listeners drained) and blocks until the app's ports are closed and Envoy's connections are done, or the supervisor's --drain-timeout ends it; under the supervisor's --native-sidecar it returns once the drain has started, since the kubelet holds the sidecar's SIGTERM until the app has exited. "+
			"Exits 0 whenever the pod may go on terminating (drained, the drain's bound reached, the proxy never ready or already gone) and says which on stdout; 1 only when the supervisor refused the request or its socket is not trusted.")
	timeout := f.fs.Duration("timeout", 25*time.Second, "how long to block at most; the drain goes on after it")
	dir := controlDirFlag(f, "the shared emptyDir `DIR` holding sock/control.sock")
	trust := supervisorUIDs(f)
	if code, done := parseFlagsOnly(f, args, env, stdout, stderr); done {
		return code
	}
	if err := positive("timeout", *timeout); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: prestop: %v\n", err)
		return 2
	}
	if f.checkOnly() {
		return 0
	}
	return app.Prestop(app.Socket{Dir: *dir, Trust: *trust}, *timeout, stdout, stderr)
}

func runStatus(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("status", "status [--control-dir DIR]", "Prints the supervisor's state as JSON.")
	dir := controlDirFlag(f, "the shared emptyDir `DIR` holding sock/control.sock")
	trust := supervisorUIDs(f)
	if code, done := parseFlagsOnly(f, args, env, stdout, stderr); done || f.checkOnly() {
		return code
	}
	return app.Status(app.Socket{Dir: *dir, Trust: *trust}, stdout, stderr)
}
