package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
)

// Wait is the wait command: it returns 0 once the supervisor behind s
// says the proxy is ready, 1 when it refused to say or timeout passed
// first.
func Wait(s Socket, timeout time.Duration, stderr io.Writer) int {
	ok, why, refused := waitReady(context.Background(), s.client(), timeout)
	return waited(ok, why, refused, timeout, stderr)
}

// WaitURL is the wait command for a proxy that is not ours: it returns 0
// once the readiness endpoint at u answers 200, 1 when timeout passed
// first.
func WaitURL(u http1.URL, timeout time.Duration, stderr io.Writer) int {
	ok, why := waitURL(u, timeout)
	return waited(ok, why, nil, timeout, stderr)
}

// waited says how a wait ended, and returns its exit code.
func waited(ok bool, why string, refused error, timeout time.Duration, stderr io.Writer) int {
	if refused != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: wait: refused: %v\n", refused)
		return 1
	}
	if !ok {
		fmt.Fprintf(stderr, "proxy-supervisor: wait: proxy not ready after %v: %s\n", timeout, why)
		return 1
	}
	return 0
}

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

// waitURL polls an HTTP readiness URL, for a proxy that is not ours.
func waitURL(url http1.URL, timeout time.Duration) (bool, string) {
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	r := envoy.NewReadyURL(url)
	why := "no answer"
	for ctx.Err() == nil {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		got := r.Check(rctx)
		// By the clock: the connection's deadline can fire before
		// rctx's timer.
		cut := !time.Now().Before(deadlineOf(rctx))
		rcancel()
		if got == "" {
			return true, ""
		}
		// A try cut by a deadline, its own second or the whole wait's,
		// says less than the answer before it (a 503, a redirect, a
		// refused port): on a starved node the cut is the client's.
		if !cut || why == "no answer" {
			why = got
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryEvery * 5):
		}
	}
	return false, why
}
