package drain

import (
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
)

type quietAdmin struct{}

func (quietAdmin) Post(context.Context, string, ...string) error { return nil }
func (quietAdmin) Connections(context.Context, []uint16) (envoy.Connections, error) {
	return envoy.Connections{}, nil
}
func (quietAdmin) ListenerPorts(context.Context) ([]uint16, error) { return nil, nil }

// listeningApp is an app that never stops listening on 8080; it counts scans.
type listeningApp struct{ scans atomic.Int64 }

func (s *listeningApp) Listening() ([]portwatch.Socket, error) {
	s.scans.Add(1)
	return []portwatch.Socket{{Addr: netip.MustParseAddrPort("127.0.0.1:8080"), UID: 1000}}, nil
}

// TestDefaultPacingWhileAppListens: a drain waiting on a listening app wakes
// the supervisor once per tick, and each wake costs 0.1-0.3 ms of CPU on a
// small VM, so the default tick must keep it to at most 25 scans a second;
// the reaction to the port's close is then one tick, 40 ms, on top of the
// quiet period.
func TestDefaultPacingWhileAppListens(t *testing.T) {
	app := &listeningApp{}
	const wait = time.Second
	r := Run(Config{Admin: quietAdmin{}, Scanner: app, Owner: portwatch.Owner{AdminPort: 15000, ProxyUID: -1}, Timeout: wait,
		Log: slog.New(slog.DiscardHandler)}, nil, nil)
	if r.End != TimedOut {
		t.Fatalf("drain ended %s, want timeout", r.End)
	}
	if n, most := app.scans.Load(), int64(wait/(40*time.Millisecond))+2; n > most {
		t.Errorf("%d scans in %v, want at most %d", n, wait, most)
	}
	if DefaultTick > 40*time.Millisecond {
		t.Errorf("DefaultTick %v would add more than 40 ms to prestop's reaction", DefaultTick)
	}
}
