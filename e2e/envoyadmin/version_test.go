package envoyadmin

import (
	"context"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/e2e/fakeenvoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
)

func TestServerInfo(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		fake fakeenvoy.EnvoyVersion
		want envoy.Version
	}{
		{fakeenvoy.EnvoyVersion{Major: 1, Minor: 28}, envoy.Version{Major: 1, Minor: 28}},
		{fakeenvoy.EnvoyVersion{Major: 1, Minor: 31, Patch: 4}, envoy.Version{Major: 1, Minor: 31, Patch: 4}},
		// Both report user_agent_build_version 1.34.0; only the build
		// string tells main's build from the release.
		{fakeenvoy.EnvoyVersion{Major: 1, Minor: 34, Dev: true}, envoy.Version{Major: 1, Minor: 34, Dev: true}},
		// Istio's proxies: a release branch between patches.
		{fakeenvoy.EnvoyVersion{Major: 1, Minor: 36, Patch: 10, Dev: true}, envoy.Version{Major: 1, Minor: 36, Patch: 10}},
		{fakeenvoy.Next, envoy.Version{Major: 1, Minor: 41, Dev: true}},
	} {
		e, a := startEnvoy(t, fakeenvoy.Options{Version: tt.fake, DrainTime: 45 * time.Second})
		select {
		case <-e.Bound():
		case <-time.After(10 * time.Second):
			t.Fatal("the fake's admin API is not bound after 10s")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := a.ServerInfo(ctx)
		cancel()
		if err != nil || got != (envoy.ServerInfo{Version: tt.want, DrainTime: 45 * time.Second}) {
			t.Errorf("%v: ServerInfo = %+v, %v; want %v and 45s", tt.fake, got, err, tt.want)
		}
	}
}
