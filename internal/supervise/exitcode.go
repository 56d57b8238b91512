package supervise

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EventKind is a kind of lifecycle event that can fix the exit code.
type EventKind int

const (
	// PeersSettled: the completion records settled the policy (not under
	// --native-sidecar or --restart-policy Always, whose end is SIGTERM).
	PeersSettled EventKind = iota
	// DeletionWindowEnded: the wait of a PeersSettled event that awaits
	// a deletion passed without a preStop or a SIGTERM.
	DeletionWindowEnded
	// Signal: SIGTERM, SIGINT or SIGQUIT arrived.
	Signal
	// PreStop: the kubelet's preStop hook asked for the drain.
	PreStop
	// ProxyExit: the proxy exited.
	ProxyExit
	// ActorFailed: a part of the supervisor failed (the health server lost
	// its listener, say).
	ActorFailed
	// StartFailed: the proxy could not be started.
	StartFailed
)

// Event is one thing that happened in the lifecycle, with what the exit
// code depends on.
type Event struct {
	Kind EventKind
	// Code: PeersSettled, the verdict's code (0, or the failed peer's,
	// never 0 for a failure: peers.Verdict reads a failure's 0 as 1);
	// ProxyExit, the proxy's code (128+N for signal N); StartFailed, 126
	// or 127.
	Code int
	// Peer: PeersSettled and DeletionWindowEnded, the peer whose failure
	// settled it, if one did.
	Peer string
	// AwaitsDeletion: PeersSettled, the failed peer may have been stopped
	// by a pod's termination (exec forwarded it the kubelet's stop signal,
	// or it was killed by SIGTERM), with the proxy's preStop hook or
	// SIGTERM still on its way, so the verdict waits for them: either
	// decides 0, and DeletionWindowEnded decides the peer's code.
	AwaitsDeletion bool
	// Signal: Signal, which one.
	Signal syscall.Signal
	// Asked: ProxyExit, whether a stop had been asked for.
	Asked bool
	// MidDrain: ProxyExit, unasked, while the termination's drain ran
	// (pilot-agent's panic when its drain POST fails, istio#60494). It
	// decides even after the deletion's 0, which said all went well.
	MidDrain bool
	// FailOnEnvoyDeath: ProxyExit, --fail-on-envoy-death.
	FailOnEnvoyDeath bool
	// Pending: ProxyExit, under --restart-policy OnFailure in a classic
	// sidecar, a peer is still pending (running, not yet reported, or
	// failed and awaiting its restart). The kubelet restarts such a container only after a
	// non-zero code, and the app needs a proxy: an exit 0 nobody asked for
	// (pilot-agent's, once Envoy crashed) would leave it without one.
	Pending bool
	// Actor: ActorFailed, which part failed.
	Actor string
}

// decide is the exit-code table, one event at a time: the code the event
// fixes, why, and whether it fixes one at all.
//
//	every expected peer succeeded           0
//	a peer failed (--restart-policy Never)  the verdict's code (1 if the peer said 0)
//	a peer failed after exec forwarded it   nothing yet: a deletion's preStop or SIGTERM
//	a stop signal, or died of SIGTERM       may follow (Supervisor.deletionWait)
//	the wait for a deletion ended           the peer's code
//	SIGTERM/SIGINT after ready               0: pod deletion, or a native sidecar's end
//	SIGTERM/SIGINT before ever ready         128+N: a failed postStart wait; under
//	                                        OnFailure a 0 would leave the pod without a proxy
//	SIGQUIT                                 131, at any time
//	preStop after ready                     0: on deletion it comes first, and the app's
//	                                        own SIGTERM must not decide the proxy's code
//	preStop before ever ready               nothing
//	the proxy exited                        its code; 1 for an exit 0 nobody asked for
//	                                        under --fail-on-envoy-death, or while a peer
//	                                        is pending under OnFailure (classic sidecar)
//	the proxy exited by itself mid-drain    its code, as above, even after the deletion's
//	                                        0 (a preStop's or SIGTERM's, never a verdict's):
//	                                        the one event that replaces a decision
//	a part of the supervisor failed         1: it must not exit 0 as if all went well
//	the proxy could not be started          126 or 127, as a shell
//
// everReady is whether the proxy had been ready when e came: the
// lifecycle's to say, never the event's sender's.
func decide(e Event, everReady bool) (code int, why string, decisive bool) {
	switch e.Kind {
	case PeersSettled:
		if e.Peer == "" {
			return e.Code, "every peer succeeded", true
		}
		if e.AwaitsDeletion {
			return 0, "", false
		}
		return peerFailed(e)
	case DeletionWindowEnded:
		code, why, _ := peerFailed(e)
		return code, why + ", and no pod deletion followed", true
	case Signal:
		name := unix.SignalName(e.Signal)
		switch {
		case e.Signal == syscall.SIGQUIT, !everReady:
			return 128 + int(e.Signal), name, true
		default:
			return 0, name, true
		}
	case PreStop:
		if !everReady {
			return 0, "", false
		}
		return 0, "preStop", true
	case ProxyExit:
		if e.Code == 0 && !e.Asked && e.Pending {
			// Under OnFailure the kubelet would not restart the proxy's
			// container after a 0, and the pending app would run on
			// without a proxy until the Job's backoff limit or deadline.
			return 1, "proxy exited 0 unasked while a peer is pending under OnFailure", true
		}
		if e.Code == 0 && !e.Asked && e.FailOnEnvoyDeath {
			// pilot-agent exits 0 within milliseconds of Envoy's death;
			// an exit nobody asked for is the failure this flag reports.
			return 1, "proxy exited 0 unasked (--fail-on-envoy-death)", true
		}
		if e.Asked {
			return e.Code, "proxy exited", true
		}
		if e.MidDrain {
			return e.Code, fmt.Sprintf("proxy exited by itself with code %d", e.Code), true
		}
		return e.Code, "proxy exited by itself", true
	case ActorFailed:
		return 1, e.Actor + " failed", true
	case StartFailed:
		return e.Code, "proxy could not be started", true
	}
	return 0, "", false
}

// peerFailed is a failed peer's code: the verdict's, which never reads a
// failure as success (peers.Policy, the one place of that rule).
func peerFailed(e Event) (code int, why string, decisive bool) {
	return e.Code, fmt.Sprintf("peer %s failed with code %d", e.Peer, e.Code), true
}

// decision is the exit code the first decisive event fixed, why, when,
// and the kind of that event. The zero value is no decision yet.
type decision struct {
	code    int
	why     string
	decided bool
	at      time.Time
	kind    EventKind
}

// take is the decision once e, at time at, has happened. Only the first
// decisive event decides, so a proxy that crashes while it is stopped after
// a successful Job still leaves 0, except a proxy that exits by itself in
// the middle of the deletion's drain: its preStop or SIGTERM decided 0,
// all well, and a proxy that died under it is not well; its why keeps what
// it replaced. A drain that a verdict started for a peer still running
// under exec replaces nothing: the verdict's code (the Job's success, or
// the failed peer's) says how the Job went, whatever the proxy did after.
func (d decision) take(e Event, everReady bool, at time.Time) decision {
	replaces := d.decided && e.Kind == ProxyExit && e.MidDrain && (d.kind == PreStop || d.kind == Signal)
	if d.decided && !replaces {
		return d
	}
	code, why, ok := decide(e, everReady)
	if !ok {
		return d
	}
	if replaces {
		why += " during the drain that " + d.why + " started"
	}
	return decision{code: code, why: why, decided: true, at: at, kind: e.Kind}
}
