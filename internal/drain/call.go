package drain

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
)

// What a sidecar's drain aims for, on every Envoy release it can: inbound
// connections are told to close; inbound listeners keep accepting until the
// app has ended, whatever Envoy's --drain-time-s; and Envoy stops no
// listener on its own before the supervisor stops it. A release that cannot
// give all three gives up the ones its Call names. The app's outbound
// connections are never told to close: a call that would tell them is not
// made, and its aims are given up instead.
const (
	AimInboundHinted    = "inbound connections told to close"
	AimInboundAccepting = "inbound listeners accepting until the app has ended"
	AimNoStop           = "no listener stopped by Envoy itself"
)

// Call is the /drain_listeners request a drain makes, chosen for Envoy's
// release.
type Call struct {
	// Flags are the query's flags; nil: no call at all.
	Flags []string
	// GivesUp are the aims this release cannot meet with this call.
	GivesUp []string
}

func (c Call) String() string {
	if c.Flags == nil {
		return "none"
	}
	return "/drain_listeners?" + strings.Join(c.Flags, "&")
}

// ChooseCall picks the drain call for Envoy release v (known false: its
// version could not be read), draining only inbound listeners (a sidecar)
// or every listener. What each flag does on which release is from Envoy's
// changelogs and the pull requests they name: skip_exit exists from 1.28.0
// (changelogs/1.28.0.yaml, envoy#30003); a graceful drain tells only the
// inbound listeners' connections from 1.34.0 (envoy#38430), every
// listener's before (envoy#35020); from 1.40.0 a drain without graceful
// tells them too (changelogs/1.40.0.yaml, envoy#47042), which changes
// nothing for the calls below. A main-branch
// X.Y.0-dev build is taken for one that has none of X.Y.0's changes
// (Version.AtLeast): a 1.34.0-dev build may predate envoy#38430.
func ChooseCall(v envoy.Version, known, inboundOnly bool) Call {
	if !inboundOnly {
		// Every listener drains, so no connection is the app's to keep.
		if known && !v.AtLeast(1, 28) {
			return Call{Flags: []string{"graceful"}, GivesUp: []string{AimInboundAccepting, AimNoStop}}
		}
		// An unknown release older than 1.28 ignores skip_exit and stops
		// its listeners after --drain-time-s: no worse than the above.
		return Call{Flags: []string{"graceful", "skip_exit"}}
	}
	if known && v.AtLeast(1, 34) {
		return Call{Flags: []string{"graceful", "inboundonly", "skip_exit"}}
	}
	// Before 1.34 every call that tells the inbound connections to close
	// tells the app's outbound ones too, in the middle of its last work; a
	// call without graceful tells nobody and stops the inbound listeners
	// at once. So no call is made: the hint is given up, the other aims
	// kept, and an unreadable version gets the same: nothing that could
	// touch the app's outbound traffic.
	return Call{GivesUp: []string{AimInboundHinted}}
}

// nextMinor is the release after 1.40, whose HTTP connection manager drains
// a draining listener's connections proactively in the last third of
// --drain-time-s (changelogs/current/minor_behavior_changes/
// http__proactive_connection_drain.rst on Envoy's main): idle ones, and
// upgraded (WebSocket) or CONNECT streams, even under skip_exit. Until a
// release carries it, 1.41 and main's 1.41.0-dev are assumed to.
const nextMinor = 41

// DrainTimeRisk says what Envoy's --drain-time-s d costs a drain bounded by
// bound on release v with call c ("" when nothing): Envoy's drain clock and
// the supervisor's are separate, and whatever Envoy does at its own times
// happens while the supervisor still waits for the app.
func DrainTimeRisk(v envoy.Version, c Call, d, bound time.Duration) string {
	if d <= 0 {
		return ""
	}
	if v.MayHave(1, nextMinor) {
		if cut := d * 2 / 3; cut < bound {
			return fmt.Sprintf("from %v into the drain (2/3 of --drain-time-s) Envoy may close idle connections and WebSocket or CONNECT streams into the app while the supervisor waits up to %v for it", cut, bound)
		}
		return ""
	}
	if d >= bound {
		return ""
	}
	if c.Flags != nil && !slices.Contains(c.Flags, "skip_exit") {
		return fmt.Sprintf("Envoy stops its listeners %v into the drain, before its bound %v", d, bound)
	}
	return fmt.Sprintf("nothing on %v, but from Envoy's next release idle connections and WebSocket or CONNECT streams into the app are closed from 2/3 of --drain-time-s, before the drain's bound %v", v, bound)
}
