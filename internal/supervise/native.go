package supervise

import (
	"fmt"

	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
)

// A native sidecar's termination (--native-sidecar). The kubelet stops every
// container the same way (kuberuntime's killContainer): the preStop hook,
// then, for a pod with native sidecars, a wait for the container's turn, and
// only then SIGTERM. A sidecar's turn comes once every regular container has
// exited (terminationOrdering, Kubernetes 1.29 and later). So on a pod's
// deletion or a Job's end a native sidecar's SIGTERM means the app has gone:
// nothing is left to drain or to wait for, and the proxy stops at once. Its
// preStop comes at the start of a deletion, beside the app's SIGTERM, or at a
// Job's end once the app has gone; the kubelet itself then holds the SIGTERM
// until the app has exited, so the hook only starts the drain (readiness
// 503, Envoy's listeners drained) and returns: had it waited for the app's
// end and a quiet period, that wait would only have put off the SIGTERM.
//
// The kubelet also kills a running sidecar to restart it, while the app
// runs: when its startupProbe or livenessProbe failed (or a resize restarts
// it). That kill has no turn to wait for: the preStop, then SIGTERM, while
// the app still runs. So the rule, at a native SIGTERM:
//
//   - the app is gone (every peer has reported its end, or none runs under
//     exec and no app port listens): the pod is terminating; stop at once;
//   - the proxy is hung (/healthz/live fails, the livenessProbe's cause):
//     a drain would need the admin API that does not answer; stop at once,
//     so that the kubelet restarts it soon;
//   - the app still runs and the proxy answers: a restart of the sidecar; the
//     drain goes on for --drain-min, as the pod leaves the endpoints, and
//     then the proxy stops. It does not wait for the app's end, which is
//     not coming.
//
// A SIGTERM before the proxy was ever ready (a failed startupProbe) stops at
// once with 143, as in every mode. Every other native SIGTERM exits 0.

// nativeTerminate is a native sidecar's SIGTERM (or SIGINT) once the proxy
// has been ready; the termination actor's.
func (t *termination) nativeTerminate(name string) {
	alive, what := t.appAlive()
	if !alive {
		t.stop(name + ": the app has exited (native sidecar)")
		return
	}
	if hung, why := t.hung(); hung {
		t.stop(name + ": the kubelet restarts a hung proxy (" + why + ")")
		return
	}
	hold := min(t.cfg.DrainMin, t.cfg.DrainTimeout)
	t.log.Info("the app still runs: the kubelet restarts this sidecar; draining for --drain-min, then stopping",
		"app", what, "drain_min", hold)
	if t.drain(name, false) == nil {
		t.log.Info("already stopping", "signal", name)
		return
	}
	if t.restartHold == nil {
		t.restartHold = t.clk.NewTimer(hold)
		t.holdWhy = name + ": the sidecar restarts while the app runs"
	}
}

// appAlive reports whether the app still runs, and what says so: a peer
// running under exec, or a listening port of the app's. Peers that have all
// reported their end are the app's end, whatever else listens in the pod
// (another sidecar's port). A scan that fails says nothing: the app counts
// as gone, since a native SIGTERM while it runs is the rare case.
func (t *termination) appAlive() (bool, string) {
	switch n, err := t.book.Running(); {
	case n > 0:
		return true, "a peer runs under exec"
	case err != nil:
		return true, "whether a peer runs under exec is unknown: " + err.Error()
	}
	if isClosed(t.book.Settled()) {
		return false, ""
	}
	socks, err := t.scanner.Listening()
	if err != nil {
		t.log.Warn("cannot list the app's ports; taking the app for gone", "err", err)
		return false, ""
	}
	if ports := portwatch.Ports(t.owner.AppSockets(socks, t.learnedPorts())); len(ports) > 0 {
		return true, fmt.Sprint("the app listens on ", ports)
	}
	return false, ""
}
