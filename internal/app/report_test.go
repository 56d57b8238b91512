package app

import (
	"bytes"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// A completion recorded while no supervisor listens is exec's usual end (the
// supervisor read the record and stopped before the poke): it is said
// calmly, with the code, and nothing in it reads like a failure.
func TestRecordedWithoutSupervisorIsCalm(t *testing.T) {
	for cmd, want := range map[string]string{
		"exec":     "proxy-supervisor: exec: completion of app (exit 3) recorded; the supervisor has already read it and stopped, or reads it when it starts\n",
		"complete": "proxy-supervisor: complete: completion of app (exit 3) recorded; no supervisor is listening: it has read the record and stopped already, or reads it when it starts\n",
	} {
		var out bytes.Buffer
		if err := newReporter(cmd, Peer{Socket{Dir: t.TempDir()}, "app"}, &out).poke(peers.Record{ExitCode: 3, Reason: peers.Exited}); err != nil || out.String() != want {
			t.Errorf("%s: %v, said %q; want %q", cmd, err, out.String(), want)
		}
	}
}
