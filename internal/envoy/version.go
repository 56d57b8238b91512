package envoy

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Version is an Envoy release, as /server_info reports it.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ServerVersion asks GET /server_info for Envoy's release: the
// user_agent_build_version numbers, or else the release in the build string
// (REVISION/1.31.4/Clean/RELEASE/BoringSSL, with -dev and the like after
// the number in builds from a branch).
func (a *Admin) ServerVersion(ctx context.Context) (Version, error) {
	resp, err := a.do(ctx, "GET", "/server_info", nil)
	if err != nil {
		return Version{}, err
	}
	if resp.Code != 200 {
		return Version{}, &StatusError{"/server_info", resp.Code, string(resp.Body)}
	}
	return parseServerInfo(resp.Body)
}

func parseServerInfo(body []byte) (Version, error) {
	var info struct {
		Version string `json:"version"`
		Node    struct {
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
		return Version{}, fmt.Errorf("admin /server_info: %w", err)
	}
	if v := info.Node.BuildVersion.Version; v != nil && v.Major > 0 {
		return Version{v.Major, v.Minor, v.Patch}, nil
	}
	parts := strings.Split(info.Version, "/")
	if len(parts) >= 2 {
		if v, ok := parseRelease(parts[1]); ok {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("admin /server_info: no release in version %q", info.Version)
}

// parseRelease reads 1.31.4, 1.31.4-dev or 1.31.
func parseRelease(s string) (Version, bool) {
	s, _, _ = strings.Cut(s, "-")
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
	return Version{n[0], n[1], n[2]}, n[0] > 0
}
