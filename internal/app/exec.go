package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
)

// forwarded is the explicit list of signals exec passes to COMMAND. The Go
// runtime's SIGURG is not among them, and neither is SIGCHLD, the reaper's.
var forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// Hooks are what the command lends Exec of the process it runs in.
type Hooks struct {
	// Held hands over, in order, the signals that came before Exec
	// subscribed its own (the command's early subscription); nil: none.
	Held func(to func(os.Signal))
	// Started runs once COMMAND has started (the runtime's tuning for the
	// long wait that follows); nil: nothing.
	Started func()
}

// Exec is the exec command: take the signals, mark the peer running while
// waiting for the proxy (up to timeout), then run command and report its
// end, or report why it did not run. It returns COMMAND's exit code, or
// peers.NotReadyCode (69) when the proxy was not ready in time, or the
// code of the stop signal that ended the wait.
func Exec(p Peer, command []string, timeout time.Duration, h Hooks, stderr io.Writer) int {
	deadline := time.Now().Add(timeout)

	// Signals are ours from the start: a SIGTERM while we wait for the
	// proxy must end this run with a record, not kill exec with its lock
	// held (which would read as lost).
	//
	// They are never given back with signal.Stop: exec ends with the
	// process, and each signal given back is a round trip to the runtime's
	// signal thread (0.3 ms of every run for the seven).
	//
	// Those that came before, held for the command, are taken as if they
	// came now.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	if h.Held != nil {
		h.Held(func(sig os.Signal) {
			select {
			case sigs <- sig:
			default:
			}
		})
	}
	if h.Started == nil {
		h.Started = func() {}
	}
	rep := newReporter("exec", p, stderr)
	st := markAndWait(sigs, rep, p.Name, deadline, stderr)
	if code, run := st.outcome(rep, command[0], timeout, stderr); !run {
		return code
	}

	end, err := runChild(command, sigs, h.Started)
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: exec: %v\n", err)
	}
	// The app's code is exec's code whatever becomes of the report: it is
	// the one fact the kubelet must get right, and a success turned into a
	// failure would make OnFailure run finished work again.
	rep.finish(st.run, end, timeout, sigs)
	return end.ExitCode
}

// execStart is how exec's wait before COMMAND ended.
type execStart struct {
	run     *peers.Run // the running record; nil when there is none
	err     error      // the record could not be begun, nor run without
	ready   bool       // the proxy is ready
	why     string     // why not
	refused error      // the supervisor refused the request
	stop    peers.Stop // a stop signal ended the wait
}

// markAndWait claims the name and marks it running while the readiness
// request is on its way: neither needs the other, and COMMAND waits for
// both. The supervisor creates peers/; an app that starts first waits for
// it as part of waiting for the proxy. A stop signal ends both waits.
func markAndWait(sigs <-chan os.Signal, rep reporter, name string, deadline time.Time, stderr io.Writer) execStart {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped, watched := watchStops(ctx, cancel, sigs)
	type readiness struct {
		ok      bool
		why     string
		refused error
	}
	readyc := make(chan readiness, 1)
	go func() {
		var r readiness
		r.ok, r.why, r.refused = waitReady(ctx, rep.client, time.Until(deadline))
		readyc <- r
	}()
	run, err := beginWhenReady(ctx, rep, name, deadline)
	var taken *peers.TakenError
	switch {
	case errors.As(err, &taken):
		// Another uid must not be able to hold the Job hostage by taking
		// the name first: run, and report the end over the socket, where
		// the supervisor's --allowed-uids decides whose report counts.
		fmt.Fprintf(stderr, "proxy-supervisor: exec: %v; running without a running record, and reporting the end over the socket\n", taken)
		err = nil
	case err == nil && run.Unclaimed() != nil:
		fmt.Fprintf(stderr, "proxy-supervisor: exec: %v; running without the claim on the name\n", run.Unclaimed())
	case err != nil && unwritable(err):
		// The app must not be held hostage by a volume it cannot write:
		// run it, and report its end over the socket.
		fmt.Fprintf(stderr, "proxy-supervisor: exec: cannot mark %s running (%v); running without the lock that marks it running, so a restarted supervisor cannot tell this run from an earlier one, and cannot see it lost if it is killed\n", name, err)
		err = nil
	}
	if err != nil {
		cancel() // nothing will run: the readiness wait has no use
	}
	r := <-readyc
	cancel()
	<-watched
	st := execStart{run: run, err: err, ready: r.ok, why: r.why, refused: r.refused}
	select {
	case st.stop = <-stopped:
	default:
	}
	return st
}

// watchStops cancels the wait at the first stop signal, and hands it on.
func watchStops(ctx context.Context, cancel func(), sigs <-chan os.Signal) (stopped <-chan peers.Stop, watched <-chan struct{}) {
	stop, done := make(chan peers.Stop, 1), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case sig := <-sigs:
				// Only a request to stop ends the wait; a terminal's
				// SIGWINCH or a log reopen's SIGUSR1 has no child to go to
				// yet, and must not end the run as signaled.
				if !isStop(sig) {
					continue
				}
				stop <- peers.StopOf(sig.(syscall.Signal), time.Now())
				cancel()
			case <-ctx.Done():
			}
			return
		}
	}()
	return stop, done
}

// outcome says whether COMMAND runs; when it does not, it reports why
// (finishing the running record) and returns exec's code.
func (st execStart) outcome(rep reporter, command string, timeout time.Duration, stderr io.Writer) (code int, run bool) {
	fail := func(code int, format string, args ...any) (int, bool) {
		fmt.Fprintf(stderr, "proxy-supervisor: exec: "+format+"\n", args...)
		return code, false
	}
	notReady := peers.Record{ExitCode: peers.NotReadyCode, Reason: peers.NotReady}
	switch {
	case st.err != nil && !st.stop.IsZero():
		// Nothing was marked running, so there is no record to finish.
		return fail(st.stop.Code(), "%s while waiting for the supervisor: %v", st.stop.Signal, st.err)
	case st.err != nil:
		return fail(peers.NotReadyCode, "%v", st.err)
	case !st.stop.IsZero():
		fmt.Fprintf(stderr, "proxy-supervisor: exec: %s while waiting for the proxy; not running %s\n", st.stop.Signal, command)
		rep.finish(st.run, peers.Record{ExitCode: st.stop.Code(), Reason: peers.Signaled, Stop: st.stop}, 0, nil)
		return st.stop.Code(), false
	case st.refused != nil:
		fmt.Fprintf(stderr, "proxy-supervisor: exec: the supervisor refused: %v; not running %s\n", st.refused, command)
		rep.finish(st.run, notReady, 0, nil)
		return peers.NotReadyCode, false
	case !st.ready:
		fmt.Fprintf(stderr, "proxy-supervisor: exec: proxy not ready after %v: %s; not running %s\n", timeout, st.why, command)
		rep.finish(st.run, notReady, 0, nil)
		return peers.NotReadyCode, false
	}
	return 0, true
}

// beginWhenReady marks the record running, retrying while the records
// directory does not exist yet.
func beginWhenReady(ctx context.Context, rep reporter, name string, deadline time.Time) (*peers.Run, error) {
	for {
		d, err := rep.records()
		if err == nil {
			var run *peers.Run
			if run, err = d.Begin(name); err == nil {
				return run, nil
			}
			d.Close()
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("mark %s running: %w", name, err)
		}
		time.Sleep(retryEvery)
	}
}

// runChild runs COMMAND and returns its end: its code the way a shell
// would give it (its exit code, 128+N for signal N, 127 or 126 when it
// cannot be started), and the first stop signal forwarded to it, if one
// was. started runs once COMMAND has started.
func runChild(argv []string, sigs <-chan os.Signal, started func()) (peers.Record, error) {
	r, err := reaper.New()
	if err != nil {
		return peers.Record{ExitCode: 1, Reason: peers.Exited}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Fd() puts a standard stream that was handed over non-blocking back in
	// blocking mode, as os/exec did, so that the app does not meet EAGAIN.
	pid, exited, err := r.Start(argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd()}})
	if err != nil {
		return peers.Record{ExitCode: reaper.StartCode(err), Reason: peers.Exited}, fmt.Errorf("start: %w", err)
	}
	go r.Run(ctx)
	started()
	var stop peers.Stop
	for {
		select {
		case sig := <-sigs:
			// Every signal exec gets came from outside the app: the
			// kubelet's stop, or a kill of the container's PID 1. The
			// first stop signal is the evidence the supervisor needs to
			// tell a pod's termination from an app that died by itself
			// (design.md, the deletion race), so it goes with the end.
			if stop.IsZero() && isStop(sig) {
				stop = peers.StopOf(sig.(syscall.Signal), time.Now())
			}
			// To the child alone, as tini does: the app decides what its
			// own children get.
			syscall.Kill(pid, sig.(syscall.Signal))
		case e := <-exited:
			end := peers.Record{ExitCode: e.Code(), Reason: peers.Exited, Stop: stop}
			if e.Status.Signaled() {
				end.Reason = peers.Signaled
			}
			return end, nil
		}
	}
}
