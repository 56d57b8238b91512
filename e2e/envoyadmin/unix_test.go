package envoyadmin

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/e2e/fakeenvoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The admin API on a unix socket (admin.address.pipe): refused before the
// socket exists and before it listens, then every call works over it, and
// it refuses again once Envoy is gone.
func TestAdminOverUnixSocket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(proctest.ShortDir(t), "admin.sock")
	a, err := adminFor("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	if a.Port() != 0 {
		t.Errorf("Port %d, want 0 for a unix socket", a.Port())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if bound, err := a.Listening(ctx); bound || err != nil {
		t.Fatalf("Bound with no socket = %v, %v; want false", bound, err)
	}
	if _, err := a.ListenerPorts(ctx); !envoy.Refused(err) {
		t.Fatalf("a call with no socket: %v, want refused", err)
	}
	e, err := fakeenvoy.Start(fakeenvoy.Options{AdminPipe: path, BindDelay: 300 * time.Millisecond,
		Listeners: []fakeenvoy.Listener{{Name: "in", Addr: "127.0.0.1:0", Inbound: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if bound, err := a.Listening(ctx); bound || err != nil {
		t.Errorf("Bound before the admin listens = %v, %v; want false", bound, err)
	}
	proctest.Eventually(t, 5*time.Second, "the admin API bound", func() bool { b, _ := a.Listening(ctx); return b })
	proctest.Eventually(t, 5*time.Second, "LIVE over the socket", func() bool { _, ready, _ := a.ServerState(ctx); return ready })
	if info, err := a.ServerInfo(ctx); err != nil || info.Version != (envoy.Version{Major: 1, Minor: 37, Patch: 2}) {
		t.Errorf("ServerInfo %+v, %v", info, err)
	}
	if ports, err := a.ListenerPorts(ctx); err != nil || len(ports) != 1 || ports[0] != e.ListenerAddrs()[0].Port() {
		t.Errorf("ListenerPorts %v, %v", ports, err)
	}
	if err := a.Post(ctx, "/quitquitquit"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the fake has not stopped 10s after /quitquitquit")
	}
	if _, err := a.Connections(ctx, nil); !envoy.Refused(err) {
		t.Errorf("after the quit: %v, want refused", err)
	}
}
