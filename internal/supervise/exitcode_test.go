package supervise

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExitCodeTable checks the lifecycle's code against the exit-code table
// of docs/reference.md, row by row, and then the rule that the first decisive
// event wins. ready: the proxy had been ready before the events.
func TestExitCodeTable(t *testing.T) {
	tests := []struct {
		row    string
		events []Event
		ready  bool
		code   int
		fixed  bool
	}{
		{row: "nothing has happened yet", fixed: false},
		{row: "every expected peer succeeded",
			events: []Event{{Kind: PeersSettled, Code: 0}}, code: 0, fixed: true},
		{row: "every expected peer succeeded, then the proxy crashed while stopping",
			events: []Event{{Kind: PeersSettled, Code: 0}, {Kind: ProxyExit, Code: 139, Asked: true}}, code: 0, fixed: true},
		{row: "every expected peer succeeded, then the proxy needed SIGKILL",
			events: []Event{{Kind: PeersSettled, Code: 0}, {Kind: ProxyExit, Code: 137, Asked: true}}, code: 0, fixed: true},
		{row: "a peer SIGTERMed under Never waits for the deletion window",
			events: []Event{{Kind: PeersSettled, Code: 143, Peer: "job", AwaitsDeletion: true}}, fixed: false},
		{row: "a peer SIGTERMed, then the window ended: the peer's code",
			events: []Event{{Kind: PeersSettled, Code: 143, Peer: "job", AwaitsDeletion: true}, {Kind: DeletionWindowEnded, Code: 143, Peer: "job"}, {Kind: ProxyExit, Code: 0, Asked: true}}, code: 143, fixed: true},
		{row: "a peer SIGTERMed, then a preStop within the window: a deletion",
			events: []Event{{Kind: PeersSettled, Code: 143, Peer: "job", AwaitsDeletion: true}, {Kind: PreStop}, {Kind: DeletionWindowEnded, Code: 143, Peer: "job"}}, ready: true, code: 0, fixed: true},
		{row: "a peer SIGTERMed, then SIGTERM within the window: a deletion",
			events: []Event{{Kind: PeersSettled, Code: 143, Peer: "job", AwaitsDeletion: true}, {Kind: Signal, Signal: syscall.SIGTERM}, {Kind: ProxyExit, Code: 0, Asked: true}}, ready: true, code: 0, fixed: true},
		{row: "a peer SIGTERMed, then a preStop after the window: the peer's code",
			events: []Event{{Kind: PeersSettled, Code: 143, Peer: "job", AwaitsDeletion: true}, {Kind: DeletionWindowEnded, Code: 143, Peer: "job"}, {Kind: PreStop}}, ready: true, code: 143, fixed: true},
		{row: "a peer SIGTERMed, then the proxy crashed within the window: its code",
			events: []Event{{Kind: PeersSettled, Code: 143, Peer: "job", AwaitsDeletion: true}, {Kind: ProxyExit, Code: 139}}, code: 139, fixed: true},
		{row: "a peer SIGTERMed, then SIGQUIT within the window: 131",
			events: []Event{{Kind: PeersSettled, Code: 143, Peer: "job", AwaitsDeletion: true}, {Kind: Signal, Signal: syscall.SIGQUIT}}, ready: true, code: 131, fixed: true},
		{row: "a peer failed (restart-policy Never)",
			events: []Event{{Kind: PeersSettled, Code: 3, Peer: "job"}}, code: 3, fixed: true},
		{row: "SIGTERM after the proxy was ready",
			events: []Event{{Kind: Signal, Signal: syscall.SIGTERM}}, ready: true, code: 0, fixed: true},
		{row: "SIGINT after the proxy was ready",
			events: []Event{{Kind: Signal, Signal: syscall.SIGINT}}, ready: true, code: 0, fixed: true},
		{row: "SIGTERM before the proxy was ever ready",
			events: []Event{{Kind: Signal, Signal: syscall.SIGTERM}}, code: 143, fixed: true},
		{row: "SIGINT before the proxy was ever ready",
			events: []Event{{Kind: Signal, Signal: syscall.SIGINT}}, code: 130, fixed: true},
		{row: "SIGQUIT",
			events: []Event{{Kind: Signal, Signal: syscall.SIGQUIT}}, ready: true, code: 131, fixed: true},
		{row: "preStop after ready",
			events: []Event{{Kind: PreStop}}, ready: true, code: 0, fixed: true},
		{row: "preStop before ready fixes nothing",
			events: []Event{{Kind: PreStop}}, fixed: false},
		{row: "preStop before ready, then the proxy exited by itself",
			events: []Event{{Kind: PreStop}, {Kind: ProxyExit, Code: 1}}, code: 1, fixed: true},
		{row: "the proxy exited by itself",
			events: []Event{{Kind: ProxyExit, Code: 1}}, code: 1, fixed: true},
		{row: "the proxy was killed by signal 11",
			events: []Event{{Kind: ProxyExit, Code: 139}}, code: 139, fixed: true},
		{row: "the proxy exited 0 unasked",
			events: []Event{{Kind: ProxyExit, Code: 0}}, code: 0, fixed: true},
		{row: "the proxy exited 0 unasked, --fail-on-envoy-death",
			events: []Event{{Kind: ProxyExit, Code: 0, FailOnEnvoyDeath: true}}, code: 1, fixed: true},
		{row: "the proxy exited 0 when asked, --fail-on-envoy-death",
			events: []Event{{Kind: ProxyExit, Code: 0, Asked: true, FailOnEnvoyDeath: true}}, code: 0, fixed: true},
		{row: "preStop, then the proxy exited by itself mid-drain (pilot-agent's panic): its code",
			events: []Event{{Kind: PreStop}, {Kind: ProxyExit, Code: 2, MidDrain: true}, {Kind: ProxyExit, Code: 0, Asked: true}}, ready: true, code: 2, fixed: true},
		{row: "SIGTERM, then the proxy exited 0 mid-drain, --fail-on-envoy-death",
			events: []Event{{Kind: Signal, Signal: syscall.SIGTERM}, {Kind: ProxyExit, Code: 0, MidDrain: true, FailOnEnvoyDeath: true}}, ready: true, code: 1, fixed: true},
		{row: "a failure, then a deletion's drain the proxy died in: the proxy's code",
			events: []Event{{Kind: PreStop}, {Kind: PeersSettled, Code: 3, Peer: "job"}, {Kind: ProxyExit, Code: 139, MidDrain: true}}, ready: true, code: 139, fixed: true},
		// Issue 38: under OnFailure the kubelet restarts a classic sidecar
		// only after a non-zero code.
		{row: "the proxy exited 0 unasked while a peer is pending under OnFailure",
			events: []Event{{Kind: ProxyExit, Code: 0, Pending: true}}, ready: true, code: 1, fixed: true},
		{row: "the proxy exited 0 unasked while a peer is pending under OnFailure, before ever ready",
			events: []Event{{Kind: ProxyExit, Code: 0, Pending: true}}, code: 1, fixed: true},
		{row: "the proxy exited 0 when asked while a peer is pending under OnFailure",
			events: []Event{{Kind: Signal, Signal: syscall.SIGTERM}, {Kind: ProxyExit, Code: 0, Asked: true, Pending: true}}, ready: true, code: 0, fixed: true},
		{row: "the proxy exited 4 unasked while a peer is pending under OnFailure: its code",
			events: []Event{{Kind: ProxyExit, Code: 4, Pending: true}}, ready: true, code: 4, fixed: true},
		{row: "SIGTERM, then the proxy exited 0 mid-drain while a peer is pending under OnFailure",
			events: []Event{{Kind: Signal, Signal: syscall.SIGTERM}, {Kind: ProxyExit, Code: 0, MidDrain: true, Pending: true}}, ready: true, code: 1, fixed: true},
		// Issue 38: a verdict's drain, for a peer still running under exec,
		// replaces nothing: the verdict's code is fixed at once.
		{row: "a peer failed, then the proxy exited by itself in the drain that waits for a running peer: the peer's code",
			events: []Event{{Kind: PeersSettled, Code: 3, Peer: "job"}, {Kind: ProxyExit, Code: 2, MidDrain: true}, {Kind: ProxyExit, Code: 0, Asked: true}}, ready: true, code: 3, fixed: true},
		{row: "every peer succeeded, then the proxy exited by itself in the drain that waits for a running peer: 0",
			events: []Event{{Kind: PeersSettled, Code: 0}, {Kind: ProxyExit, Code: 139, MidDrain: true}, {Kind: ProxyExit, Code: 0, Asked: true}}, ready: true, code: 0, fixed: true},
		{row: "a peer failed, then a preStop joined the drain, then the proxy died in it: the peer's code",
			events: []Event{{Kind: PeersSettled, Code: 3, Peer: "job"}, {Kind: PreStop}, {Kind: ProxyExit, Code: 2, MidDrain: true}, {Kind: ProxyExit, Code: 0, Asked: true}}, ready: true, code: 3, fixed: true},
		{row: "a part of the supervisor failed",
			events: []Event{{Kind: ActorFailed, Actor: "health server"}, {Kind: ProxyExit, Code: 0, Asked: true}}, code: 1, fixed: true},
		{row: "command not found",
			events: []Event{{Kind: StartFailed, Code: 127}}, code: 127, fixed: true},
		{row: "command not executable",
			events: []Event{{Kind: StartFailed, Code: 126}}, code: 126, fixed: true},
		{row: "SIGTERM before ready, then a completion: the first wins",
			events: []Event{{Kind: Signal, Signal: syscall.SIGTERM}, {Kind: PeersSettled, Code: 0}, {Kind: ProxyExit, Code: 137, Asked: true}}, code: 143, fixed: true},
		{row: "a failure, then SIGTERM after ready: the first wins",
			events: []Event{{Kind: PeersSettled, Code: 2, Peer: "job"}, {Kind: Signal, Signal: syscall.SIGTERM}}, ready: true, code: 2, fixed: true},
	}
	for _, tt := range tests {
		t.Run(tt.row, func(t *testing.T) {
			l, _ := newTestLifecycle()
			if tt.ready && !l.becameReady(time.Now(), "test") {
				t.Fatal("first readiness refused")
			}
			for _, e := range tt.events {
				l.record(e)
			}
			code, why, fixed := l.exitCode()
			if fixed != tt.fixed || code != tt.code {
				t.Fatalf("exit code %d (%q), fixed %v; want %d, fixed %v", code, why, fixed, tt.code, tt.fixed)
			}
			if fixed && why == "" {
				t.Error("a fixed code must say which event fixed it")
			}
			if fixed && tt.events[len(tt.events)-1].MidDrain && !strings.Contains(why, "during the drain that ") {
				t.Errorf("why %q does not say the proxy's exit mid-drain replaced a decision", why)
			}
		})
	}
}
