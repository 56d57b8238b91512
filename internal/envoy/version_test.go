package envoy

import (
	"context"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/fakeenvoy"
)

func TestServerVersion(t *testing.T) {
	t.Parallel()
	for _, want := range []Version{{1, 28, 0}, {1, 31, 4}, {1, 40, 1}} {
		e, a := startEnvoy(t, fakeenvoy.Options{Version: fakeenvoy.EnvoyVersion{Major: want.Major, Minor: want.Minor, Patch: want.Patch}})
		select {
		case <-e.Bound():
		case <-time.After(10 * time.Second):
			t.Fatal("the fake's admin API is not bound after 10s")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := a.ServerVersion(ctx)
		cancel()
		if err != nil || got != want {
			t.Errorf("ServerVersion = %v, %v; want %v", got, err, want)
		}
	}
}

func TestParseServerInfo(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body string
		want Version
		ok   bool
	}{
		{`{"version": "abc/1.33.2/Clean/RELEASE/BoringSSL"}`, Version{1, 33, 2}, true},
		{`{"version": "abc/1.41.0-dev/Modified/DEBUG/BoringSSL"}`, Version{1, 41, 0}, true},
		{`{"version": "x", "node": {"user_agent_build_version": {"version": {"major_number": 1, "minor_number": 36}}}}`, Version{1, 36, 0}, true},
		{`{"version": "custom-build"}`, Version{}, false},
		{`not json`, Version{}, false},
	} {
		got, err := parseServerInfo([]byte(tt.body))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("%s: %v, %v; want %v (ok %v)", tt.body, got, err, tt.want, tt.ok)
		}
	}
}
