package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
)

// retryEvery is how often a client tries again while no supervisor listens
// yet. Once one does, readiness is a long poll and arrives the moment it is
// known.
const retryEvery = 10 * time.Millisecond

// waitReady waits until the supervisor behind c says the proxy is ready, or
// until timeout. It returns the supervisor's last reason when it gives up.
// A wait that gives up fails; it never proceeds without the proxy. A
// refusal ends the wait at once with its error, because asking again would
// only be refused again: a 4xx answer (a uid outside --allowed-uids), or a
// socket served by a uid that is not trusted to be the supervisor.
func waitReady(ctx context.Context, c *control.Client, timeout time.Duration) (ready bool, why string, refused error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	why = "no supervisor listening on " + c.Path()
	answered := false // why is the server's own reason
	for {
		left := time.Until(deadlineOf(ctx))
		if left <= 0 {
			return false, why, nil
		}
		// Ask the server to answer a little before our own deadline, so
		// that a proxy that is not ready comes back with its reason rather
		// than as a cancelled request: a quarter of the wait, and at least
		// 500 ms (half of a shorter wait), for a loaded node's scheduling
		// (250 ms was cut under the race detector at a load of 40).
		margin := max(left/4, min(500*time.Millisecond, left/2))
		ready, reason, err := c.Ready(ctx, min(left-margin, control.MaxWait))
		switch {
		case ready:
			return true, "", nil
		case err == nil:
			why, answered = reason, true
			continue // the long poll ended without readiness; ask again
		case control.Rejected(err):
			return false, "", err
		case control.Unavailable(err):
			why = "no supervisor listening on " + c.Path()
		case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			// Our deadline cut the request (the connection's deadline can
			// fire before ctx's timer): the server's last answer, if it gave
			// one, says more than the cut.
			if !answered {
				why = err.Error()
			}
			return false, why, nil
		default:
			why = err.Error()
		}
		select {
		case <-ctx.Done():
			return false, why, nil
		case <-time.After(retryEvery):
		}
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// supervisorUIDs adds --supervisor-uid to a client command.
func supervisorUIDs(f *flags) *uidList {
	var u uidList
	f.fs.Var(&u, "supervisor-uid", "comma list of uids the supervisor may run as besides 0, 1337 (Istio's proxy) and this process's own; a control socket served by any other uid is refused")
	return &u
}

// readinessEndpoint is what --url and --extra-ready-url name.
const readinessEndpoint = "a local proxy's readiness endpoint, such as pilot-agent's http://127.0.0.1:15020/healthz/ready"

// waitURL polls an HTTP readiness URL, for a proxy that is not ours.
func waitURL(url string, timeout time.Duration) (bool, string) {
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	r, err := envoy.NewReadyURL(url)
	if err != nil {
		return false, err.Error()
	}
	why := "no answer"
	for ctx.Err() == nil {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		got := r.Check(rctx)
		rcancel()
		if got == "" {
			return true, ""
		}
		// A try that the whole wait's deadline cut says less than the
		// answer before it (a 503, a redirect, a refused port).
		if ctx.Err() == nil || why == "no answer" {
			why = got
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryEvery * 5):
		}
	}
	return false, why
}

func runWait(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("wait", "wait [--timeout DURATION] [--control-dir DIR | --url URL]",
		"Exits 0 once the proxy is ready, or non-zero at the timeout. Fits a postStart hook and an app's start script.")
	timeout := f.fs.Duration("timeout", 60*time.Second, "how long to wait")
	dir := controlDirFlag(f, "the shared emptyDir `DIR` holding sock/control.sock")
	url := &httpURL{what: readinessEndpoint}
	f.fs.Var(url, "url", "an http:// readiness `URL` to poll instead of the control socket (a proxy that is not ours); plain HTTP only")
	trust := supervisorUIDs(f)
	if code, done := parseFlagsOnly(f, args, env, stdout, stderr); done {
		return code
	}
	if err := positive("timeout", *timeout); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: wait: %v\n", err)
		return 2
	}
	if url.val != "" && f.explicit("control-dir") {
		fmt.Fprintln(stderr, "proxy-supervisor: wait: give --control-dir or --url, not both")
		return 2
	}
	if f.checkOnly() {
		return 0
	}
	var ok bool
	var why string
	var refused error
	if url.val != "" {
		ok, why = waitURL(url.val, *timeout)
	} else {
		ok, why, refused = waitReady(context.Background(), control.NewClient(*dir, *trust...), *timeout)
	}
	if refused != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: wait: refused: %v\n", refused)
		return 1
	}
	if !ok {
		fmt.Fprintf(stderr, "proxy-supervisor: wait: proxy not ready after %v: %s\n", *timeout, why)
		return 1
	}
	return 0
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
	ctx, cancel := context.WithTimeout(context.Background(), *timeout+time.Second)
	defer cancel()
	drained, why, err := control.NewClient(*dir, *trust...).Drain(ctx, *timeout)
	msg, code := prestopOutcome(drained, why, err, *timeout)
	w := stdout
	if code != 0 {
		w = stderr
	}
	fmt.Fprintf(w, "proxy-supervisor: prestop: %s\n", msg)
	return code
}

// prestopOutcome is what the preStop hook says and exits with. A hook that
// fails makes the kubelet record FailedPreStopHook, and changes nothing
// else: it goes on with the termination either way. So every end that lets
// the pod terminate as designed is 0, and only a refusal, a sign of a
// misconfigured pod, is 1.
func prestopOutcome(drained bool, why string, err error, timeout time.Duration) (string, int) {
	switch {
	case control.Rejected(err):
		return err.Error(), 1
	case control.Unavailable(err):
		return "no supervisor is listening: the proxy is gone or never started", 0
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within --timeout %v; the supervisor's drain goes on", timeout), 0
	case err != nil:
		return fmt.Sprintf("the supervisor is gone: %v", err), 0
	case why == control.NeverReady:
		return "the proxy was never ready: nothing to drain", 0
	case why == control.AlreadyStopping:
		return "the proxy is already stopping", 0
	case why == control.PeersCompleted:
		return "every peer has completed: nothing to drain", 0
	case why == control.DrainTimedOut:
		return "the drain reached its bound (--drain-timeout) with connections or app ports still open; the pod may terminate", 0
	case strings.HasPrefix(why, control.DrainTimedOut+":"):
		return fmt.Sprintf("the drain reached its bound (--drain-timeout): %s; the pod may terminate", strings.TrimSpace(strings.TrimPrefix(why, control.DrainTimedOut+":"))), 0
	case strings.HasPrefix(why, control.Stopped+":"):
		return fmt.Sprintf("the supervisor stopped before the drain ended (%s); the pod may terminate", strings.TrimSpace(strings.TrimPrefix(why, control.Stopped+":"))), 0
	case why == control.NativeSidecar:
		return "drain started; the kubelet's SIGTERM stops the proxy once the app has exited (native sidecar)", 0
	case why == control.StillDraining:
		return fmt.Sprintf("still draining after --timeout %v; the supervisor's drain goes on", timeout), 0
	case drained:
		return "drained", 0
	}
	return fmt.Sprintf("drain ended: %s", why), 0
}

func runStatus(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("status", "status [--control-dir DIR]", "Prints the supervisor's state as JSON.")
	dir := controlDirFlag(f, "the shared emptyDir `DIR` holding sock/control.sock")
	trust := supervisorUIDs(f)
	if code, done := parseFlagsOnly(f, args, env, stdout, stderr); done || f.checkOnly() {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := control.NewClient(*dir, *trust...).Status(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: status: %v\n", err)
		return 1
	}
	var out bytes.Buffer
	if json.Indent(&out, raw, "", "  ") != nil {
		out.Write(raw)
	}
	out.WriteByte('\n')
	stdout.Write(out.Bytes())
	return 0
}

func runInstall(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("install", "install DIR", "Copies this binary to DIR/proxy-supervisor atomically, mode 0755, creating DIR, for app containers that mount DIR read-only (an init container's job).")
	rest, code, done := parseOrExit(f, args, env, stdout, stderr)
	if done {
		return code
	}
	if len(rest) != 1 {
		fmt.Fprintln(stderr, "proxy-supervisor: install: want exactly one DIR")
		return 2
	}
	if f.checkOnly() {
		return 0
	}
	dst, err := install(rest[0])
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: install: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, dst)
	return 0
}

// install copies the running binary into dir atomically (a temp file renamed
// over the old one), so that an app container never sees half a binary and a
// second install never writes into a file another container runs. dir is
// created: it is usually a subdirectory of a fresh emptyDir.
func install(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the running binary: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer src.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".proxy-supervisor-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, src)
	err = errors.Join(err, tmp.Chmod(0o755), tmp.Sync(), tmp.Close())
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", self, err)
	}
	dst := filepath.Join(dir, "proxy-supervisor")
	return dst, os.Rename(tmp.Name(), dst)
}
