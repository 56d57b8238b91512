package fakeenvoy

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvoyVersion is the Envoy release the fake behaves like: what /server_info
// and --version report, and what /drain_listeners does with its flags,
// which has changed three times (see the methods below). The zero value is
// DefaultVersion.
type EnvoyVersion struct {
	Major, Minor, Patch int
	// Dev is a build between releases, reporting X.Y.Z-dev. With Z = 0 it
	// is from Envoy's main branch, and the fake makes it one from before any
	// of X.Y.0's changes merged (a 1.34.0-dev build may predate envoy#38430):
	// it behaves as the release before, but for what main carries that no
	// release has (Next). With Z > 0 it is from the X.Y release branch after
	// X.Y.(Z-1), as Istio's proxies report themselves, and behaves as X.Y.
	Dev bool
	// Unnumbered is a build that reports no release (a fork's own version
	// string, and no user_agent_build_version numbers): a client cannot
	// tell what it does. It behaves as DefaultVersion.
	Unnumbered bool
}

// unnumbered is what --fake-version takes for an Unnumbered build, and the
// release field of its build string.
const unnumbered = "custom"

// Next is Envoy's main branch after 1.40: what the next release is to carry
// (proactiveDrain), as a build of it reports itself. --fake-version takes it
// as "next".
var Next = EnvoyVersion{Major: 1, Minor: 41, Dev: true}

const next = "next"

// DefaultVersion is the release the fake is when none is chosen.
var DefaultVersion = EnvoyVersion{Major: 1, Minor: 37, Patch: 2}

// ParseVersion reads MAJOR.MINOR[.PATCH][-dev], such as 1.31, 1.36.4 or
// 1.36.10-dev, "next" (Next), or "custom" for an Unnumbered build.
func ParseVersion(s string) (EnvoyVersion, error) {
	switch s {
	case unnumbered:
		return EnvoyVersion{Unnumbered: true}, nil
	case next:
		return Next, nil
	}
	s, dev := strings.CutSuffix(s, "-dev")
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return EnvoyVersion{}, fmt.Errorf("version %q: want MAJOR.MINOR[.PATCH]", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || (i == 0 && v != 1) {
			return EnvoyVersion{}, fmt.Errorf("version %q: want 1.MINOR[.PATCH]", s)
		}
		n[i] = v
	}
	return EnvoyVersion{Major: n[0], Minor: n[1], Patch: n[2], Dev: dev}, nil
}

// orDefault is the release v behaves as.
func (v EnvoyVersion) orDefault() EnvoyVersion {
	if v.Major == 0 {
		return DefaultVersion
	}
	return v
}

// numbers are what user_agent_build_version reports: none for Unnumbered.
func (v EnvoyVersion) numbers() (major, minor, patch int) {
	if v.Unnumbered {
		return 0, 0, 0
	}
	v = v.orDefault()
	return v.Major, v.Minor, v.Patch
}

func (v EnvoyVersion) String() string {
	if v.Unnumbered {
		return unnumbered
	}
	v = v.orDefault()
	if v.Dev {
		return fmt.Sprintf("%d.%d.%d-dev", v.Major, v.Minor, v.Patch)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// Build is the build string /server_info reports, in Envoy's shape. The
// revision is all zeros so that nobody mistakes it for a real build.
func (v EnvoyVersion) Build() string {
	return envoyRevision + "/" + v.String() + "/Clean/RELEASE/BoringSSL"
}

// atLeast is whether v carries what shipped in 1.minor.0; main's
// 1.minor.0-dev does not.
func (v EnvoyVersion) atLeast(minor int) bool {
	v = v.orDefault()
	return v.Major > 1 || v.Minor > minor || v.Minor == minor && !(v.Dev && v.Patch == 0)
}

// knowsSkipExit: /drain_listeners' skip_exit came with envoy#30003, first
// in 1.28.0 (changelogs/1.28.0.yaml, new_features, admin: "Added a new
// skip_exit query parameter to /drain_listeners to skip exiting after the
// drain period"). Before it the parameter is unknown, and Envoy ignores
// parameters it does not know.
func (v EnvoyVersion) knowsSkipExit() bool { return v.atLeast(28) }

// drainsOneDirection: before envoy#38430, first in 1.34.0
// (changelogs/1.34.0.yaml: "Add support for the inbound_only and graceful
// query params of /drain_listeners to be used together by implementing
// directional draining in DrainManager"), the drain manager had no
// direction. envoy#38430 relanded envoy#37873, which envoy#38329 had
// reverted; the 1.33 cherry-pick (#38331) was closed unmerged, and
// changelogs/1.33.1.yaml has no drain entry. Before it inboundonly chose
// only which listeners stop at the end; a graceful drain told the
// connections of every listener, outbound included, to close (envoy#35020).
func (v EnvoyVersion) drainsOneDirection() bool { return v.atLeast(34) }

// nonGracefulDrains: before envoy#47042 (merged 2026-08-27, first in 1.40.0,
// runtime guard envoy.reloadable_features.non_graceful_drain_notifies_connections)
// a drain without graceful only stopped the listeners, telling no
// connection, and skip_exit without graceful was refused with a 400. Since,
// every drain tells the connections in its direction; graceful only
// delays the stop by --drain-time-s, and skip_exit, with or without
// graceful, never stops the listeners.
func (v EnvoyVersion) nonGracefulDrains() bool { return v.atLeast(40) }

// tcpProxyChecksDrain: tcp_proxy's check_drain_close came with envoy#44567
// (merged May 2026, first in 1.39.0; "close downstream connections with
// FlushWrite when the drain manager requests drain close during downstream
// read or write handling"). It is off unless configured, and Istio sets it
// nowhere (istio/istio master, August 2026). The decision is the drain
// manager's for the listener's direction (inbound: inboundonly drains
// count), taken when bytes pass in either direction: an idle tcp_proxy
// connection is closed at its next byte, not before. 1.40's
// use_connection_event_drain (changelogs/1.40.0.yaml, server: "Connection
// drain-close decisions (HTTP connection manager, TCP proxy, ...) are now
// derived from a drain event that is pushed to each connection when the
// drain sequence starts") changes where the decision comes from, not when
// tcp_proxy acts on it, and tcp_proxy already scoped inbound listeners to
// inboundonly drains; the Mongo, Redis, Thrift and generic proxies it fixed
// are not modelled. Its companion filter_chain_drain_uses_configured_strategy
// concerns filter chains drained by an LDS update, which the fake never has.
func (v EnvoyVersion) tcpProxyChecksDrain() bool { return v.atLeast(39) }

// proactiveDrain: on Envoy's main after 1.40 (changelogs/current/
// minor_behavior_changes/http__proactive_connection_drain.rst), "the HTTP
// connection manager now proactively drains the connections of a draining
// listener in the last third of the drain time, rather than only checking
// the drain state when a response is sent", idle connections and upgraded
// (WebSocket) or CONNECT streams included, so that they are not all closed
// at the end; not when --drain-time-s leaves no room for it after the
// connection manager's drain_timeout. It rides on use_connection_event_drain,
// so it comes with every drain that tells connections, skip_exit or not.
// Assumed of the release that follows 1.40 until one carries it.
func (v EnvoyVersion) proactiveDrain() bool { return v.atLeast(41) || v == Next }
