package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/cmd/proxy-supervisor/internal/earlysig"
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

func peerFlags(f *flags) (name, dir *string, trust *uidList) {
	name = f.text("name", control.DefaultPeer, "NAME", "this peer's name; set it literally in each app container's manifest (the downward API cannot give a container its own name)")
	dir = controlDirFlag(f, "the shared emptyDir `DIR` holding sock/control.sock and peers/")
	return name, dir, supervisorUIDs(f)
}

// runExec is an app container's command: check the flags, take the
// signals, mark this peer running while waiting for the proxy, then run
// COMMAND and report its end, or report why it did not run.
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
	deadline := time.Now().Add(*timeout)

	// Signals are ours from the start: a SIGTERM while we wait for the
	// proxy must end this run with a record, not kill exec with its lock
	// held (which would read as lost).
	//
	// They are never given back with signal.Stop: exec ends with the
	// process, and each signal given back is a round trip to the runtime's
	// signal thread (0.3 ms of every run for the seven).
	//
	// Those that came since the packages' initialisation, held by
	// earlysig, are taken as if they came now.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	earlysig.Hand(func(sig os.Signal) {
		select {
		case sigs <- sig:
		default:
		}
	})
	rep := newReporter("exec", *dir, *name, *trust, stderr)
	st := markAndWait(sigs, rep, *name, deadline, stderr)
	if code, run := st.outcome(rep, cmdline[0], *timeout, stderr); !run {
		return code
	}

	end, err := runChild(cmdline, sigs, func() { oneP(env) })
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: exec: %v\n", err)
	}
	// The app's code is exec's code whatever becomes of the report: it is
	// the one fact the kubelet must get right, and a success turned into a
	// failure would make OnFailure run finished work again.
	rep.finish(st.run, end, *timeout, sigs)
	return end.ExitCode
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

// unwritable reports whether err means that the records cannot be written
// where the supervisor reads them: the volume takes no writes (read-only,
// full, out of quota or inodes, failing, or not writable for this uid), or
// peers/ is not the supervisor's. A name that another container owns or
// holds is another matter.
func unwritable(err error) bool {
	for _, errno := range []error{unix.EROFS, unix.ENOSPC, unix.EDQUOT, unix.EIO, unix.EACCES} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return errors.As(err, new(*peers.UntrustedDirError))
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

// writeWhenReady writes a final record, waiting while the records directory
// does not exist yet: an app can finish before the proxy container has ever
// started, and only the supervisor may create the directory (it must own it).
func writeWhenReady(rep reporter, rec peers.Record, deadline time.Time, stderr io.Writer) error {
	said := false
	for {
		err := rep.write(rec)
		if err == nil || !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return err
		}
		if !said {
			fmt.Fprintf(stderr, "proxy-supervisor: complete: waiting for the supervisor to create %s\n", peers.Open(rep.dir).Path())
			said = true
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

// reporter tells the supervisor how a peer ended: by its record, then a
// poke on the socket; or, when the record cannot be written, by the socket
// alone.
type reporter struct {
	cmd, dir, name string
	// client is exec's one client of the socket: when readiness came by a
	// request, the completion goes over its connection, if the supervisor
	// kept it open.
	client *control.Client
	stderr io.Writer
}

// newReporter reports for peer name through the socket in dir, served by a
// uid in trust.
func newReporter(cmd, dir, name string, trust uidList, stderr io.Writer) reporter {
	return reporter{cmd: cmd, dir: dir, name: name, client: control.NewClient(dir, trust...), stderr: stderr}
}

// records opens peers/ once and checks that the supervisor owns it, as the
// socket's server is checked: where the control dir is not sticky (Istio's
// emptyDir), another uid can rename the supervisor's peers/ away and make
// its own, and a record written there by path would reach no supervisor.
// Every write of the run then goes through that one descriptor, so a swap
// while COMMAND runs cannot redirect the final record either.
func (r reporter) records() (peers.Dir, error) {
	return peers.Open(r.dir).Hold(r.client.Trusts)
}

// write writes a final record in the supervisor's peers/ (records).
func (r reporter) write(rec peers.Record) error {
	d, err := r.records()
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Write(rec)
}

func (r reporter) say(format string, args ...any) {
	fmt.Fprintf(r.stderr, "proxy-supervisor: %s: "+format+"\n", append([]any{r.cmd}, args...)...)
}

// finish records exec's end (its code, reason and stop) and tells the
// supervisor. run is the running record's lock, nil when it could not be
// taken. It is released only once the end is recorded or reported:
// released first, it would make the supervisor count the run lost (137)
// before the report arrived. When the record cannot be written, a
// supervisor that does not answer is waited for up to wait (zero: asked
// once), or until a stop signal on sigs.
func (r reporter) finish(run *peers.Run, end peers.Record, wait time.Duration, sigs <-chan os.Signal) {
	end.Name = r.name
	var err error
	if run != nil {
		err = run.Finish(end.ExitCode, end.Reason, end.Stop) // releases the lock only once the record is in place
	} else {
		err = r.write(end)
	}
	if err == nil {
		r.poke(end)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	go func() {
		for {
			select {
			case sig := <-sigs:
				if isStop(sig) {
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	r.deliver(ctx, end, err)
	r.release(run)
}

// release lets go of the running record's lock once the end was reported
// over the socket, so that the release reads as that end, not as a loss.
func (r reporter) release(run *peers.Run) {
	if run == nil {
		return
	}
	if err := run.Abort(); err != nil {
		r.say("%v", err)
	}
}

// poke tells the supervisor to read the records now. It fails only when the
// supervisor refused the report (an unknown name, say); a supervisor that is
// not listening reads the record when it starts.
func (r reporter) poke(end peers.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), pokeTimeout)
	defer cancel()
	code := end.ExitCode
	err := r.client.Complete(ctx, r.completion(end))
	switch {
	case err == nil:
		return nil
	case control.Rejected(err):
		r.say("the supervisor refused the completion of %s: %v", r.name, err)
		return err
	case control.Unavailable(err):
		// The usual end of a Job under exec: the supervisor watches peers/,
		// so it has often read the record and stopped before this poke.
		// That is said calmly: nothing is wrong, and nothing is lost.
		if r.cmd == "exec" {
			r.say("completion of %s (exit %d) recorded; the supervisor has already read it and stopped, or reads it when it starts", r.name, code)
		} else {
			r.say("completion of %s (exit %d) recorded; no supervisor is listening: it has read the record and stopped already, or reads it when it starts", r.name, code)
		}
	default:
		r.say("completion of %s recorded; the supervisor did not answer (%v): it may have read the record and stopped already, and otherwise reads it on its next scan", r.name, err)
	}
	return nil
}

// pokeTimeout bounds one request to the supervisor.
const pokeTimeout = 5 * time.Second

// deliver reports a completion whose record could not be written (why) over
// the socket alone. That is then its only way to the supervisor, so while
// none answers, it asks again until ctx ends: a restarting proxy container
// comes back. The supervisor keeps what it is told (peers/.posted, and in
// memory if the volume refuses that too).
func (r reporter) deliver(ctx context.Context, end peers.Record, why error) error {
	code := end.ExitCode
	r.say("cannot record the completion of %s (exit %d): %v; reporting it over the socket", r.name, code, why)
	c := r.client
	said := false
	for {
		// Each try gets its own bound, so that a wait of zero still asks once.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pokeTimeout)
		err := c.Complete(rctx, r.completion(end))
		cancel()
		switch {
		case err == nil:
			r.say("the supervisor took the completion of %s (exit %d) over the socket; peers/ holds no record of it", r.name, code)
			return nil
		case control.Rejected(err):
			r.say("completion of %s (exit %d) is lost: it could not be recorded, and the supervisor refused it: %v", r.name, code, err)
			return err
		}
		if !said && ctx.Err() == nil {
			r.say("no supervisor took it yet (%v); asking again until it does", err)
			said = true
		}
		select {
		case <-ctx.Done():
			r.say("completion of %s (exit %d) is lost: it could not be recorded (%v), and no supervisor took it (%v)", r.name, code, why, err)
			return fmt.Errorf("completion of %s lost", r.name)
		case <-time.After(deliverEvery):
		}
	}
}

// completion is this peer's end as the socket reports it.
func (r reporter) completion(end peers.Record) control.Completion {
	return control.Completion{Peer: r.name, Code: end.ExitCode, Reason: string(end.Reason), StopSignal: end.Stop.Signal, StoppedAt: end.Stop.At}
}

// deliverEvery is how often deliver asks again.
const deliverEvery = 100 * time.Millisecond

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
	deadline := time.Now().Add(*timeout)
	rep := newReporter("complete", *dir, *name, *trust, stderr)
	rec := peers.Record{Name: *name, ExitCode: int(code), Reason: peers.Exited, Time: time.Now()}
	err := writeWhenReady(rep, rec, deadline, stderr)
	switch {
	case err == nil:
		if rep.poke(rec) != nil {
			return 1
		}
		return 0
	case unwritable(err), errors.As(err, new(*peers.TakenError)):
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if rep.deliver(ctx, rec, err) != nil {
			return 1
		}
		return 0
	default:
		fmt.Fprintf(stderr, "proxy-supervisor: complete: %v\n", err)
		return 1
	}
}

// isStop reports whether sig asks a client to stop: a terminal's SIGWINCH or
// a log reopen's SIGUSR1 must not end a wait.
func isStop(sig os.Signal) bool {
	return sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGQUIT || sig == syscall.SIGHUP
}
