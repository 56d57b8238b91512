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
	// Unnumbered is a build that reports no release (a fork's own version
	// string, and no user_agent_build_version numbers): a client cannot
	// tell what it does. It behaves as DefaultVersion.
	Unnumbered bool
}

// unnumbered is what --fake-version takes for an Unnumbered build, and the
// release field of its build string.
const unnumbered = "custom"

// DefaultVersion is the release the fake is when none is chosen.
var DefaultVersion = EnvoyVersion{Major: 1, Minor: 37, Patch: 2}

// ParseVersion reads MAJOR.MINOR[.PATCH], such as 1.31 or 1.36.4, or
// "custom" for an Unnumbered build.
func ParseVersion(s string) (EnvoyVersion, error) {
	if s == unnumbered {
		return EnvoyVersion{Unnumbered: true}, nil
	}
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
	return EnvoyVersion{Major: n[0], Minor: n[1], Patch: n[2]}, nil
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
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// Build is the build string /server_info reports, in Envoy's shape. The
// revision is all zeros so that nobody mistakes it for a real build.
func (v EnvoyVersion) Build() string {
	return envoyRevision + "/" + v.String() + "/Clean/RELEASE/BoringSSL"
}

func (v EnvoyVersion) atLeast(minor int) bool {
	v = v.orDefault()
	return v.Major > 1 || v.Minor >= minor
}

// knowsSkipExit: /drain_listeners' skip_exit came with envoy#30003 (merged
// October 2023, after the 1.28 branch; first in 1.29.0). Before it the
// parameter is unknown, and Envoy ignores parameters it does not know.
func (v EnvoyVersion) knowsSkipExit() bool { return v.atLeast(29) }

// drainsOneDirection: before envoy#37873 (merged January 2025, first in
// 1.34.0; the 1.33 cherry-pick #38331 was closed) the drain manager had no
// direction. inboundonly chose only which listeners stop at the end; a
// graceful drain told the connections of every listener, outbound included,
// to close (envoy#35020).
func (v EnvoyVersion) drainsOneDirection() bool { return v.atLeast(34) }

// nonGracefulDrains: before envoy#47042 (merged 2026-08-27, first in 1.40.0,
// runtime guard envoy.reloadable_features.non_graceful_drain_notifies_connections)
// a drain without graceful only stopped the listeners, telling no
// connection, and skip_exit without graceful was refused with a 400. Since,
// every drain tells the connections in its direction; graceful only
// delays the stop by --drain-time-s, and skip_exit, with or without
// graceful, never stops the listeners.
func (v EnvoyVersion) nonGracefulDrains() bool { return v.atLeast(40) }
