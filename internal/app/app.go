// Package app is the app container's side of the protocol: what the
// commands that run in the app's container (exec, complete, wait, prestop,
// status) do once their flags are read. Each talks to the supervisor
// through its control socket, and exec and complete also through the
// completion records in peers/ (docs/design.md, "Architecture").
//
// Each function is one command: it writes the command's messages, one line
// each ("proxy-supervisor: CMD: ..."), and returns its exit code.
package app

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// Socket is the supervisor a client asks: its control directory (the
// shared emptyDir) and the uids it may run as besides 0, 1337 and the
// client's own (--supervisor-uid).
type Socket struct {
	Dir   string
	Trust []uint32
}

// client is the socket's client.
func (s Socket) client() *control.Client { return control.NewClient(s.Dir, s.Trust...) }

// Peer is one app container, as it reports its completion.
type Peer struct {
	Socket
	Name string
}

// retryEvery is how often a client tries again while no supervisor listens
// yet. Once one does, readiness is a long poll and arrives the moment it is
// known.
const retryEvery = 10 * time.Millisecond

// isStop reports whether sig asks a client to stop: a terminal's SIGWINCH or
// a log reopen's SIGUSR1 must not end a wait.
func isStop(sig os.Signal) bool {
	return sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGQUIT || sig == syscall.SIGHUP
}

// unwritable reports whether err means that the records cannot be written
// where the supervisor reads them: the volume takes no writes (read-only,
// full, out of quota or inodes, failing, or not writable for this uid), or
// peers/ is not the supervisor's. A name that another container owns or
// holds is another matter.
func unwritable(err error) bool {
	for _, errno := range []error{unix.EROFS, unix.ENOSPC, unix.EDQUOT, unix.EIO, unix.EACCES} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return errors.As(err, new(*peers.UntrustedDirError))
}
