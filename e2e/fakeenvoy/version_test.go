package fakeenvoy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// drainCase is what one /drain_listeners call does on a release.
type drainCase struct {
	query          string
	code           int
	inHinted       bool // an inbound keep-alive's next response says close
	outHinted      bool // an outbound one's does
	inStopsAtOnce  bool // the inbound listener refuses at once
	inStops        bool // it refuses after the drain time
	outStops       bool
	outStopsAtOnce bool
}

// drainTable is every combination of the flags on each release the
// boundaries separate.
var drainTable = map[string][]drainCase{
	// Before envoy#30003 (1.28.0): skip_exit is ignored, so --drain-time-s
	// stops the listeners; before envoy#38430 a graceful drain hints every
	// listener.
	"1.27": {
		{"graceful&inboundonly&skip_exit", 200, true, true, false, true, false, false},
		{"graceful&skip_exit", 200, true, true, false, true, true, false},
		{"skip_exit", 200, false, false, true, true, true, true},
	},
	// envoy#30003 without envoy#38430: skip_exit keeps the listeners, but
	// the sidecar's call still hints the outbound listener (envoy#35020).
	"1.28": {
		{"graceful&inboundonly&skip_exit", 200, true, true, false, false, false, false},
		{"skip_exit", 400, false, false, false, false, false, false},
	},
	// A main-branch build before 1.34.0 is modelled without envoy#38430.
	"1.34.0-dev": {
		{"graceful&inboundonly&skip_exit", 200, true, true, false, false, false, false},
	},
	"1.31": {
		{"graceful&inboundonly&skip_exit", 200, true, true, false, false, false, false},
		{"graceful&inboundonly", 200, true, true, false, true, false, false},
		{"graceful", 200, true, true, false, true, true, false},
		{"graceful&skip_exit", 200, true, true, false, false, false, false},
		{"inboundonly", 200, false, false, true, true, false, false},
		{"", 200, false, false, true, true, true, true},
		{"skip_exit", 400, false, false, false, false, false, false},
	},
	// envoy#38430: inboundonly drains one direction.
	"1.36": {
		{"graceful&inboundonly&skip_exit", 200, true, false, false, false, false, false},
		{"graceful&inboundonly", 200, true, false, false, true, false, false},
		{"graceful", 200, true, true, false, true, true, false},
		{"graceful=false", 200, true, true, false, true, true, false}, // presence counts, not value
		{"graceful&skip_exit", 200, true, true, false, false, false, false},
		{"inboundonly", 200, false, false, true, true, false, false},
		{"", 200, false, false, true, true, true, true},
		{"skip_exit", 400, false, false, false, false, false, false},
	},
	// envoy#47042: a drain without graceful tells the connections too, and
	// skip_exit stands alone.
	"1.40": {
		{"graceful&inboundonly&skip_exit", 200, true, false, false, false, false, false},
		{"graceful&inboundonly", 200, true, false, false, true, false, false},
		{"inboundonly&skip_exit", 200, true, false, false, false, false, false},
		{"inboundonly", 200, true, false, true, true, false, false},
		{"", 200, true, true, true, true, true, true},
		{"skip_exit", 200, true, true, false, false, false, false},
	},
}

func TestDrainByVersion(t *testing.T) {
	t.Parallel()
	const drainTime = 3 * time.Second // the "at once" checks come well before it, even on a loaded machine
	for version, cases := range drainTable {
		v, err := ParseVersion(version)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range cases {
			t.Run(version+"/"+tt.query, func(t *testing.T) {
				t.Parallel()
				e := startLive(t, Options{Version: v, DrainTime: drainTime, DrainStrategy: "immediate", Listeners: []Listener{
					{Name: "out", Addr: "127.0.0.1:0"},
					{Name: "in", Addr: "127.0.0.1:0", Inbound: true},
				}})
				out, in := e.ListenerAddrs()[0].String(), e.ListenerAddrs()[1].String()
				keptOut, keptIn := dialHTTP(t, out), dialHTTP(t, in)
				keptOut.get()
				keptIn.get()
				if a := call(t, e, "POST", "/drain_listeners?"+tt.query); a.code != tt.code {
					t.Fatalf("%d %q, want %d", a.code, a.body, tt.code)
				}
				if got := refused(in); got != tt.inStopsAtOnce {
					t.Errorf("inbound refused at once = %v, want %v", got, tt.inStopsAtOnce)
				}
				if got := refused(out); got != tt.outStopsAtOnce {
					t.Errorf("outbound refused at once = %v, want %v", got, tt.outStopsAtOnce)
				}
				if got := keptIn.get(); got != tt.inHinted {
					t.Errorf("inbound keep-alive told to close = %v, want %v", got, tt.inHinted)
				}
				if got := keptOut.get(); got != tt.outHinted {
					t.Errorf("outbound keep-alive told to close = %v, want %v", got, tt.outHinted)
				}
				time.Sleep(drainTime + 300*time.Millisecond)
				if got := refused(in); got != tt.inStops {
					t.Errorf("inbound refused after the drain time = %v, want %v", got, tt.inStops)
				}
				if got := refused(out); got != tt.outStops {
					t.Errorf("outbound refused after the drain time = %v, want %v", got, tt.outStops)
				}
			})
		}
	}
}

func TestServerInfoReportsTheVersion(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v    EnvoyVersion
		want string
	}{
		{EnvoyVersion{}, "/1.37.2/"},
		{EnvoyVersion{Major: 1, Minor: 31, Patch: 4}, "/1.31.4/"},
		{EnvoyVersion{Major: 1, Minor: 40}, "/1.40.0/"},
		{EnvoyVersion{Unnumbered: true}, "/custom/"}, // a build that reports no release
		{EnvoyVersion{Major: 1, Minor: 34, Dev: true}, "/1.34.0-dev/"},
		{Next, "/1.41.0-dev/"},
	} {
		e := startLive(t, Options{Version: tt.v})
		a := call(t, e, "GET", "/server_info")
		major, minor, patch := tt.v.numbers()
		num := fmt.Sprintf("\"major_number\": %d,\n    \"minor_number\": %d,\n    \"patch\": %d\n", major, minor, patch)
		if !strings.Contains(a.body, `"version": "`+envoyRevision+tt.want) || !strings.Contains(a.body, num) {
			t.Errorf("%v: /server_info lacks %s or %s:\n%s", tt.v, tt.want, num, a.body)
		}
	}
	if v, err := ParseVersion("custom"); err != nil || !v.Unnumbered || !v.drainsOneDirection() {
		t.Errorf("ParseVersion(custom) = %+v, %v; want an unnumbered build behaving as the default", v, err)
	}
	if v, err := ParseVersion("1.34.0-dev"); err != nil || !v.Dev || v.drainsOneDirection() || !v.knowsSkipExit() {
		t.Errorf("ParseVersion(1.34.0-dev) = %+v, %v; want a main build without envoy#38430", v, err)
	}
	if v, err := ParseVersion("next"); err != nil || v != Next {
		t.Errorf("ParseVersion(next) = %+v, %v; want %+v", v, err, Next)
	}
	if v, err := ParseVersion("1.34.2-dev"); err != nil || v.String() != "1.34.2-dev" || !v.drainsOneDirection() {
		t.Errorf("ParseVersion(1.34.2-dev) = %+v, %v; want a 1.34 release-branch build", v, err)
	}
	for _, bad := range []string{"1", "2.1", "1.x", "1.2.3.4", "v1.31", "1.31-rc"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) took it", bad)
		}
	}
}
