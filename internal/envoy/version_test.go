package envoy

import (
	"testing"
	"time"
)

func TestParseServerInfo(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body  string
		want  Version
		drain time.Duration
		ok    bool
	}{
		{`{"version": "abc/1.33.2/Clean/RELEASE/BoringSSL"}`, Version{Major: 1, Minor: 33, Patch: 2}, 0, true},
		{`{"version": "abc/1.41.0-dev/Modified/DEBUG/BoringSSL"}`, Version{Major: 1, Minor: 41, Dev: true}, 0, true},
		{`{"version": "abc/1.39.1-dev/Clean/RELEASE/BoringSSL"}`, Version{Major: 1, Minor: 39, Patch: 1}, 0, true},
		{`{"version": "abc/1.38.0-contrib/Clean/RELEASE/BoringSSL"}`, Version{Major: 1, Minor: 38}, 0, true},
		{`{"version": "abc/1.40.0-dev-contrib/Clean/RELEASE/BoringSSL"}`, Version{Major: 1, Minor: 40, Dev: true}, 0, true},
		{`{"version": "x", "node": {"user_agent_build_version": {"version": {"major_number": 1, "minor_number": 36}}}}`, Version{Major: 1, Minor: 36}, 0, true},
		{`{"version": "abc/1.34.0-dev/Clean/RELEASE/BoringSSL", "node": {"user_agent_build_version": {"version": {"major_number": 1, "minor_number": 34}}}}`, Version{Major: 1, Minor: 34, Dev: true}, 0, true},
		{`{"version": "abc/1.37.2/Clean/RELEASE/BoringSSL", "command_line_options": {"drain_time": "45s"}}`, Version{Major: 1, Minor: 37, Patch: 2}, 45 * time.Second, true},
		{`{"version": "abc/1.37.2/Clean/RELEASE/BoringSSL", "command_line_options": {"drain_time": "0.500s"}}`, Version{Major: 1, Minor: 37, Patch: 2}, 500 * time.Millisecond, true},
		{`{"version": "abc/1.37.2/Clean/RELEASE/BoringSSL", "command_line_options": {"drain_time": "soon"}}`, Version{Major: 1, Minor: 37, Patch: 2}, 0, true},
		{`{"version": "custom-build"}`, Version{}, 0, false},
		{`not json`, Version{}, 0, false},
	} {
		got, err := parseServerInfo([]byte(tt.body))
		if (err == nil) != tt.ok || got.Version != tt.want || got.DrainTime != tt.drain {
			t.Errorf("%s: %+v, %v; want %v, %v (ok %v)", tt.body, got, err, tt.want, tt.drain, tt.ok)
		}
	}
}

// A main-branch X.Y.0-dev build may lack what shipped in X.Y.0, and may
// carry it: AtLeast says the first, MayHave the second.
func TestVersionOrder(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v                Version
		atLeast, mayHave bool
	}{
		{Version{Major: 1, Minor: 34}, true, true},
		{Version{Major: 1, Minor: 34, Dev: true}, false, true},
		{Version{Major: 1, Minor: 35, Dev: true}, true, true},
		{Version{Major: 1, Minor: 33, Patch: 9}, false, false},
		{Version{Major: 2}, true, true},
	} {
		if got := tt.v.AtLeast(1, 34); got != tt.atLeast {
			t.Errorf("%v.AtLeast(1, 34) = %v", tt.v, got)
		}
		if got := tt.v.MayHave(1, 34); got != tt.mayHave {
			t.Errorf("%v.MayHave(1, 34) = %v", tt.v, got)
		}
	}
}
