package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
)

// Prestop is the prestop command (the proxy's preStop hook): it starts the
// drain and blocks until it is done, or up to timeout, and says which on
// stdout. It returns 0 whenever the pod may go on terminating, and 1, said
// on stderr, only when the supervisor refused or its socket is not
// trusted.
func Prestop(s Socket, timeout time.Duration, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
	defer cancel()
	drained, why, err := s.client().Drain(ctx, timeout)
	msg, code := prestopOutcome(drained, why, err, timeout)
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
