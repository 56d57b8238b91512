package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// Complete is the complete command: record peer p's completion with code,
// durably, then tell the supervisor. It succeeds even when no supervisor is
// listening: the supervisor reads the record when it starts. When the
// record cannot be written, the completion goes over the socket alone, and
// a supervisor is waited for up to timeout. It returns 0 once the
// completion is recorded or taken, 1 when it was neither or the supervisor
// refused it.
func Complete(p Peer, code int, timeout time.Duration, stderr io.Writer) int {
	deadline := time.Now().Add(timeout)
	rep := newReporter("complete", p, stderr)
	// Started marks the record as this run's of the pod, even written
	// before any supervisor of the run has started (peers.EarlierRun).
	rec := peers.Record{Name: p.Name, ExitCode: code, Reason: peers.Exited, Time: time.Now(), Started: peers.ContainerStarted()}
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

// newReporter reports for peer p, as command cmd.
func newReporter(cmd string, p Peer, stderr io.Writer) reporter {
	return reporter{cmd: cmd, dir: p.Dir, name: p.Name, client: p.client(), stderr: stderr}
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
		end.Started = peers.ContainerStarted()
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
