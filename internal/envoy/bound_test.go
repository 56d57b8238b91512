package envoy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The probe must not wait as a blocking connect would (its answer: bound).
func TestBoundWithAFullBacklogIsBounded(t *testing.T) {
	a, err := adminFor("http://" + proctest.FullBacklog(t).String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	bound, err := a.Listening(ctx)
	if took := time.Since(began); took > time.Second {
		t.Fatalf("Listening took %v against a full backlog", took)
	}
	if err != nil || !bound {
		t.Fatalf("Listening = %v, %v; want bound", bound, err)
	}
}

// An admin call's connect is bounded by the dial's own second, whatever
// the call's bound: a proxy that stops accepting is found out at the next
// poll.
func TestAdminDialIsBounded(t *testing.T) {
	a, err := adminFor("http://" + proctest.FullBacklog(t).String())
	if err != nil {
		t.Fatal(err)
	}
	a.Timeout = time.Hour
	began := time.Now()
	_, _, err = a.ServerState(context.Background())
	// A loaded machine is late, never early.
	if took := time.Since(began); took < time.Second || took > 3*time.Second {
		t.Errorf("the call took %v, want the dial's second", took)
	}
	// The dial's context or its socket's deadline, whichever fires first.
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("err %v, want the dial's timeout", err)
	}
}

func TestBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := adminFor("http://" + ln.Addr().String())
	if ok, err := a.Listening(context.Background()); !ok || err != nil {
		t.Fatalf("listening port: %v %v", ok, err)
	}
	ln.Close()
	if ok, err := a.Listening(context.Background()); ok || err != nil {
		t.Fatalf("closed port: %v %v", ok, err)
	}
}

// localhost is 127.0.0.1 then ::1. In a pod without IPv6 on lo, ::1 cannot
// be reached at all; once 127.0.0.1 has refused, that is an unbound port,
// not an error (which took the tracker off its cheap probe, and hid
// Envoy's death at the proxy's exit). A link-local address without a zone
// fails its connect the same way here, on any machine.
func TestListeningTakesAnUnreachableSecondAddressAsUnbound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	a, err := adminFor("http://" + refused.String())
	if err != nil {
		t.Fatal(err)
	}
	a.tcp = []netip.AddrPort{refused, netip.MustParseAddrPort("[fe80::1]:80")}
	if bound, err := a.Listening(context.Background()); bound || err != nil {
		t.Fatalf("Listening = %v, %v; want unbound, no error", bound, err)
	}
	a.tcp = a.tcp[1:] // alone, the unreachable address is an error
	if _, err := a.Listening(context.Background()); err == nil {
		t.Fatal("Listening on an unreachable address alone: no error")
	}
}
