package app

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
)

// The preStop hook exits 0 whenever the pod may go on terminating: a 1
// only makes the kubelet record FailedPreStopHook. (A drain that reached
// its bound, or a supervisor already gone, exited 1.)
func TestPrestopOutcome(t *testing.T) {
	tests := []struct {
		name    string
		drained bool
		why     string
		err     error
		code    int
	}{
		{"drained", true, control.Drained, nil, 0},
		{"peers completed", true, control.PeersCompleted, nil, 0},
		{"bound reached", false, control.DrainTimedOut, nil, 0},
		{"bound reached, peers/ replaced", false, control.DrainTimedOut + ": peers/ was replaced", nil, 0},
		{"never ready", true, control.NeverReady, nil, 0},
		{"already stopping", true, control.AlreadyStopping, nil, 0},
		{"native sidecar", true, control.NativeSidecar, nil, 0},
		{"still draining at --timeout", false, control.StillDraining, nil, 0},
		{"supervisor stopped mid-drain", false, control.Stopped + ": killed by SIGSEGV (code 139)", nil, 0},
		{"no supervisor", false, "", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), 0},
		{"socket gone", false, "", fmt.Errorf("dial: %w", syscall.ENOENT), 0},
		{"supervisor exited mid-answer", false, "", fmt.Errorf("read: %w", syscall.ECONNRESET), 0},
		{"no answer in time", false, "", fmt.Errorf("do: %w", context.DeadlineExceeded), 0},
		{"refused", false, "", &control.APIError{Code: 403, Msg: "uid 1000 is not allowed"}, 1},
		{"untrusted socket", false, "", &control.UntrustedError{Path: "/x", UID: 1000}, 1},
	}
	for _, tt := range tests {
		msg, code := prestopOutcome(tt.drained, tt.why, tt.err, 25*time.Second)
		if code != tt.code || msg == "" {
			t.Errorf("%s: exit %d (%q), want %d with a reason", tt.name, code, msg, tt.code)
		}
	}
}
