package control

// The reasons of /v1/drain's answer: the words on the wire between the
// supervisor (Backend.Drain's why) and the preStop hook's client, which
// tells the kubelet's log what they mean. Stopped is followed by ": " and
// what stopped the supervisor; DrainTimedOut may be, by what held the drain
// in the app's place (the records directory replaced).
const (
	// How the drain itself ended.
	Drained        = "drained"         // its condition held for the quiet period
	DrainTimedOut  = "timeout"         // its bound (--drain-timeout) came first
	PeersCompleted = "peers-completed" // every peer ended: nothing left to wait for

	// What the supervisor answers besides.
	NeverReady      = "never-ready"      // the proxy was never ready: nothing to drain
	AlreadyStopping = "already-stopping" // the proxy is stopping or gone
	StillDraining   = "still-draining"   // the request's wait ended first
	Stopped         = "stopped"          // the supervisor stopped before the drain ended
	NativeSidecar   = "native-sidecar"   // the drain started; the kubelet's SIGTERM, once the app has exited, stops the proxy
)
