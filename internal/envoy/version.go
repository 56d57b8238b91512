package envoy

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version is an Envoy release, as /server_info reports it.
type Version struct {
	Major, Minor, Patch int
	// Dev is a build from Envoy's main branch, X.Y.0-dev: made at any point
	// between the X.(Y-1).0 branch and X.Y.0, it may lack any change that
	// first shipped in X.Y.0. A release branch's X.Y.Z-dev (Z > 0, what
	// Istio's proxies report between patches) follows X.Y.(Z-1) and is not
	// Dev.
	Dev bool
}

func (v Version) String() string {
	if v.Dev {
		return fmt.Sprintf("%d.%d.%d-dev", v.Major, v.Minor, v.Patch)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// AtLeast reports whether v surely carries what shipped in major.minor.0:
// a Dev build of that very release may predate any of it.
func (v Version) AtLeast(major, minor int) bool {
	if v.Dev && v.Major == major && v.Minor == minor {
		return false
	}
	return v.MayHave(major, minor)
}

// MayHave reports whether v may carry what shipped in major.minor.0: a Dev
// build of that release may. A change that harms is assumed of it.
func (v Version) MayHave(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ServerInfo is what the supervisor reads from GET /server_info.
type ServerInfo struct {
	Version Version
	// DrainTime is Envoy's --drain-time-s (command_line_options.drain_time);
	// zero when not reported.
	DrainTime time.Duration
}

// ServerInfo asks GET /server_info for Envoy's release and drain time. The
// release is the user_agent_build_version numbers, or else the one in the
// build string (REVISION/1.31.4/Clean/RELEASE/BoringSSL); the build string's
// -dev after X.Y.0 marks a main-branch build either way, since the numbers
// do not say it.
func (a *Admin) ServerInfo(ctx context.Context) (ServerInfo, error) {
	resp, err := a.do(ctx, "GET", "/server_info", nil)
	if err != nil {
		return ServerInfo{}, err
	}
	if resp.Code != 200 {
		return ServerInfo{}, &StatusError{"/server_info", resp.Code, string(resp.Body)}
	}
	return parseServerInfo(resp.Body)
}

func parseServerInfo(body []byte) (ServerInfo, error) {
	var info struct {
		Version string `json:"version"`
		Options struct {
			DrainTime string `json:"drain_time"`
		} `json:"command_line_options"`
		Node struct {
			BuildVersion struct {
				Version *struct {
					Major int `json:"major_number"`
					Minor int `json:"minor_number"`
					Patch int `json:"patch"`
				} `json:"version"`
			} `json:"user_agent_build_version"`
		} `json:"node"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return ServerInfo{}, fmt.Errorf("admin /server_info: %w", err)
	}
	var out ServerInfo
	if d, err := time.ParseDuration(info.Options.DrainTime); err == nil && d > 0 {
		out.DrainTime = d
	}
	built, builtOK := Version{}, false
	if parts := strings.Split(info.Version, "/"); len(parts) >= 2 {
		built, builtOK = parseRelease(parts[1])
	}
	if v := info.Node.BuildVersion.Version; v != nil && v.Major > 0 {
		out.Version = Version{Major: v.Major, Minor: v.Minor, Patch: v.Patch}
		out.Version.Dev = builtOK && built.Dev && built.Major == v.Major && built.Minor == v.Minor && built.Patch == v.Patch
		return out, nil
	}
	if builtOK {
		out.Version = built
		return out, nil
	}
	return out, fmt.Errorf("admin /server_info: no release in version %q", info.Version)
}

// parseRelease reads 1.31.4, 1.31.4-dev, 1.38.0-contrib or 1.31. Only a
// -dev X.Y.0 is Dev: other suffixes name release builds.
func parseRelease(s string) (Version, bool) {
	s, suffix, _ := strings.Cut(s, "-")
	f := strings.Split(s, ".")
	if len(f) < 2 || len(f) > 3 {
		return Version{}, false
	}
	var n [3]int
	for i, p := range f {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, false
		}
		n[i] = v
	}
	dev := n[2] == 0 && (suffix == "dev" || strings.HasPrefix(suffix, "dev-"))
	return Version{Major: n[0], Minor: n[1], Patch: n[2], Dev: dev}, n[0] > 0
}
