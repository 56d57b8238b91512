package supervise

import (
	"syscall"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The deletion wait: a failed peer may be the first sign of the pod's
// deletion, whose preStop or SIGTERM for the proxy is still on its way; the
// verdict waits for it, within a bound, before the peer's code decides.

// verdictDone acts on a verdict that stops the proxy. A failed peer may be
// the first sign of the pod's deletion, whose preStop or SIGTERM for the
// proxy is still on its way; the verdict then waits for them
// (deletionWait), and the first decides 0 (see decide) and ends the wait.
func (t *termination) verdictDone(v peers.Verdict, why string) {
	wait := t.deletionWait(v, t.clk.Now())
	t.life.record(Event{Kind: PeersSettled, Code: v.Code, Peer: v.Failed, AwaitsDeletion: wait > 0})
	if wait <= 0 {
		t.stopAfterVerdict(why)
		return
	}
	if v.Stop.IsZero() {
		t.log.Info("peer ended by SIGTERM; waiting for a pod deletion's preStop or SIGTERM before deciding the exit code",
			"peer", v.Failed, "window", wait)
	} else {
		t.log.Info("peer stopped from outside; waiting for the pod's termination to reach the proxy (its preStop or SIGTERM) before deciding the exit code",
			"peer", v.Failed, "exit_code", v.Code, "stop_signal", v.Stop.Signal, "stopped_at", v.Stop.At, "bound", wait)
	}
	t.deletion = t.clk.NewTimer(wait)
	t.awaitingVerdict = why
	t.deletionPeer, t.deletionCode = v.Failed, v.Code
}

// deletionWindowEnded: no preStop or SIGTERM came within the wait, and the
// failed peer's code decides.
func (t *termination) deletionWindowEnded() {
	why := t.awaitingVerdict
	t.deletion, t.awaitingVerdict = nil, ""
	t.life.record(Event{Kind: DeletionWindowEnded, Code: t.deletionCode, Peer: t.deletionPeer})
	t.stopAfterVerdict(why)
}

// deletionDecided ends the deletion wait once an event has fixed the code:
// a preStop or SIGTERM, the pod terminates. The trigger's drain has started
// (or the proxy is stopping); the verdict joins it, so that the proxy
// stops once it ends, rather than under another peer's last requests or
// under the hook that is draining.
func (t *termination) deletionDecided() {
	if t.deletion == nil {
		return
	}
	if _, _, decided := t.life.exitCode(); !decided {
		return
	}
	t.deletion.Stop()
	why := t.awaitingVerdict
	t.deletion, t.awaitingVerdict = nil, ""
	if t.drain(why, true) == nil {
		t.stop(why)
	}
}

// deletionWait is how long a verdict that stops the proxy waits, from now,
// for the pod's deletion to reach the proxy before the failed peer's code
// decides; zero: it decides at once. Only a final failure stops the proxy:
// under Never, or for a peer whose own policy (--peer-restart) the kubelet
// does not restart it by; it is the verdict's to say which.
//
// A peer that exec saw stopped from outside (v.Stop: the kubelet's stop
// signal, which exec forwarded) was stopped by the kubelet: on a pod's
// termination, when the kubelet reaches every container within the grace
// period (its preStop hook run, then its stop signal); or alone, on a
// failed liveness or startup probe, when nothing reaches the proxy. So the
// wait is bounded by the grace period from the app's stop signal, plus the
// deletion window for the kubelet's own stop call after a hook that took
// the whole period. The evidence decides, not a race: a busy kubelet's
// late hook still finds the proxy running. A stop time from the future
// (a skewed or lying report) counts from now.
//
// A peer killed by a SIGTERM without that evidence waits the deletion
// window, a guess (DefaultDeletionWindow).
func (t *termination) deletionWait(v peers.Verdict, now time.Time) time.Duration {
	switch {
	case v.Failed == "":
		return 0
	case !v.Stop.IsZero():
		bound := t.cfg.GracePeriod + t.cfg.DeletionWindow
		return min(max(v.Stop.At.Add(bound).Sub(now), t.cfg.DeletionWindow), bound)
	case v.Reason == peers.Signaled && v.Code == 128+int(syscall.SIGTERM):
		return t.cfg.DeletionWindow
	}
	return 0
}
