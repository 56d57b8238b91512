package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
)

// forwarded is the explicit list of signals exec passes to COMMAND. The Go
// runtime's SIGURG is not among them, and neither is SIGCHLD, the reaper's.
var forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

func peerFlags(f *flags) (name, dir *string) {
	name = f.fs.String("name", control.DefaultPeer, "this peer's name; set it literally in each app container's manifest (the downward API cannot give a container its own name)")
	dir = f.fs.String("control-dir", DefaultControlDir, "the shared emptyDir holding control.sock and peers/")
	return name, dir
}

func runExec(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("exec", "exec [--name N] [--timeout D] [--control-dir DIR] -- COMMAND [ARG...]",
		"Marks this peer running, waits until the proxy is ready, runs COMMAND (forwarding signals, reaping orphans), records its completion and exits with its code. If the proxy is not ready within --timeout it records not-ready and exits 69 without running COMMAND.")
	name, dir := peerFlags(f)
	timeout := f.fs.Duration("timeout", 10*time.Minute, "how long to wait for the proxy (Istio's startup budget)")
	cmdline, code, done := parseOrExit(f, args, env, stdout, stderr)
	if done {
		return code
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "proxy-supervisor: exec: "+format+"\n", args...)
		return code
	}
	if len(cmdline) == 0 {
		return fail(2, "no COMMAND given: exec [flags] -- COMMAND [ARG...]")
	}
	if err := peers.ValidName(*name); err != nil {
		return fail(2, "--name: %v", err)
	}
	if err := positive("timeout", *timeout); err != nil {
		return fail(2, "%v", err)
	}
	if f.checkOnly() {
		return 0
	}
	deadline := time.Now().Add(*timeout)

	// Signals are ours from the start: a SIGTERM while we wait for the
	// proxy must end this run with a record, not kill exec with its lock
	// held (which would read as lost).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped, watched := make(chan os.Signal, 1), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-sigs:
			stopped <- sig
			cancel()
		case <-ctx.Done():
		}
	}()

	// The supervisor creates peers/; an app that starts first waits for it
	// as part of waiting for the proxy.
	rec, err := beginWhenReady(ctx, peers.Open(*dir), *name, deadline)
	var ok bool
	var why string
	if err == nil {
		ok, why = waitReady(ctx, *dir, time.Until(deadline))
	}
	cancel()
	<-watched
	var stop os.Signal
	select {
	case stop = <-stopped:
	default:
	}
	if err != nil {
		// Nothing was marked running, so there is no record to finish.
		if stop != nil {
			return fail(128+int(stop.(syscall.Signal)), "%v while waiting for the supervisor: %v", stop, err)
		}
		return fail(peers.NotReadyCode, "%v", err)
	}
	if stop != nil {
		code := 128 + int(stop.(syscall.Signal))
		fmt.Fprintf(stderr, "proxy-supervisor: exec: %v while waiting for the proxy; not running %s\n", stop, cmdline[0])
		finish(rec, *dir, code, peers.Signaled, stderr)
		return code
	}
	if !ok {
		fmt.Fprintf(stderr, "proxy-supervisor: exec: proxy not ready after %v: %s; not running %s\n", *timeout, why, cmdline[0])
		finish(rec, *dir, peers.NotReadyCode, peers.NotReady, stderr)
		return peers.NotReadyCode
	}

	code, reason, err := runChild(cmdline, sigs)
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: exec: %v\n", err)
	}
	finish(rec, *dir, code, reason, stderr)
	return code
}

// beginWhenReady marks the record running, retrying while the records
// directory does not exist yet.
func beginWhenReady(ctx context.Context, d peers.Dir, name string, deadline time.Time) (*peers.Run, error) {
	for {
		run, err := d.Begin(name)
		if err == nil {
			return run, nil
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("mark %s running: %w", name, err)
		}
		time.Sleep(retryEvery)
	}
}

// writeWhenReady writes a final record, waiting while the records directory
// does not exist yet: an app can finish before the proxy container has ever
// started, and only the supervisor may create the directory (it must own it).
func writeWhenReady(d peers.Dir, rec peers.Record, deadline time.Time, stderr io.Writer) error {
	said := false
	for {
		err := d.Write(rec)
		if err == nil || !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return err
		}
		if !said {
			fmt.Fprintf(stderr, "proxy-supervisor: complete: waiting for the supervisor to create %s\n", d.Path())
			said = true
		}
		time.Sleep(retryEvery)
	}
}

// runChild runs COMMAND and returns its code the way a shell would: its exit
// code, 128+N for signal N, 127 or 126 when it cannot be started.
func runChild(argv []string, sigs <-chan os.Signal) (int, peers.Reason, error) {
	r, err := reaper.New()
	if err != nil {
		return 1, peers.Exited, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	exited, err := r.Start(cmd)
	if err != nil {
		return reaper.StartCode(err), peers.Exited, fmt.Errorf("start %s: %w", argv[0], err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Release()
	go r.Run(ctx)
	for {
		select {
		case sig := <-sigs:
			// To the child alone, as tini does: the app decides what its
			// own children get.
			syscall.Kill(pid, sig.(syscall.Signal))
		case e := <-exited:
			if e.Status.Signaled() {
				return e.Code(), peers.Signaled, nil
			}
			return e.Code(), peers.Exited, nil
		}
	}
}

// finish writes the final record, then pokes the supervisor. The record is
// what counts; the poke only makes the supervisor read it now.
func finish(rec *peers.Run, dir string, code int, reason peers.Reason, stderr io.Writer) {
	if err := rec.Finish(code, reason); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: exec: record completion: %v\n", err)
		return
	}
	poke(dir, rec.Name(), code, reason, "exec", stderr)
}

// poke tells the supervisor to read the records now. It fails only when the
// supervisor refused the report (an unknown name, say); a supervisor that is
// not listening reads the record when it starts.
func poke(dir, name string, code int, reason peers.Reason, cmd string, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := control.NewClient(dir).Complete(ctx, name, code, string(reason))
	var refused *control.APIError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused):
		fmt.Fprintf(stderr, "proxy-supervisor: %s: the supervisor refused the completion of %s: %v\n", cmd, name, err)
		return err
	case control.Unavailable(err):
		fmt.Fprintf(stderr, "proxy-supervisor: %s: completion of %s recorded; no supervisor is listening yet, and it will read the record when it starts\n", cmd, name)
	default:
		fmt.Fprintf(stderr, "proxy-supervisor: %s: completion of %s recorded; telling the supervisor failed (%v), and it will read the record on its next scan\n", cmd, name, err)
	}
	return nil
}

func runComplete(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("complete", "complete [--name N] [--exit-code C] [--control-dir DIR]",
		"Records this peer's completion durably, then tells the supervisor. It succeeds even when no supervisor is listening: the supervisor reads the record when it starts.")
	name, dir := peerFlags(f)
	code := f.fs.Int("exit-code", 0, "the peer's exit code, 0 to 255")
	timeout := f.fs.Duration("timeout", 10*time.Minute, "how long to wait for the supervisor to create peers/ when it has never run in this pod yet")
	if _, c, done := parseOrExit(f, args, env, stdout, stderr); done {
		return c
	}
	if err := peers.ValidName(*name); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: complete: --name: %v\n", err)
		return 2
	}
	if err := peers.ValidCode(*code); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: complete: --exit-code: %v\n", err)
		return 2
	}
	if f.checkOnly() {
		return 0
	}
	rec := peers.Record{Name: *name, ExitCode: *code, Reason: peers.Exited, Time: time.Now()}
	if err := writeWhenReady(peers.Open(*dir), rec, time.Now().Add(*timeout), stderr); err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: complete: %v\n", err)
		return 1
	}
	if poke(*dir, *name, *code, peers.Exited, "complete", stderr) != nil {
		return 1
	}
	return 0
}
