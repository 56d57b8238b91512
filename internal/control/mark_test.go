package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// While the socket file carries the ready mark, Ready answers true without
// a request: the backend here never says ready, and is never asked. Without
// the mark, Ready asks as before.
func TestReadyMarkAnswersWithoutARequest(t *testing.T) {
	b := newBackend()
	s, c := serve(t, b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	s.MarkReady(true)
	fi, err := os.Lstat(s.Path())
	if err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket mode %v (%v), want 0666 with the sticky bit", fi.Mode(), err)
	}
	if ready, why, err := c.Ready(ctx, time.Second); !ready || err != nil {
		t.Fatalf("Ready with the mark: %v %q %v", ready, why, err)
	}
	if n := b.waits.Load(); n != 0 {
		t.Fatalf("the backend was asked %d times; the mark should have answered", n)
	}

	s.MarkReady(false)
	if fi, err := os.Lstat(s.Path()); err != nil || fi.Mode()&os.ModeSticky != 0 {
		t.Fatalf("socket mode %v (%v) after the mark was cleared", fi.Mode(), err)
	}
	if ready, _, err := c.Ready(ctx, 50*time.Millisecond); ready || err != nil {
		t.Fatalf("Ready without the mark: %v %v; want the backend's not ready", ready, err)
	}
	if n := b.waits.Load(); n != 1 {
		t.Fatalf("the backend was asked %d times, want once", n)
	}
}

// A mark left on a socket file that nothing listens on (a supervisor killed
// while ready) says nothing: Ready fails as for no supervisor.
func TestStaleReadyMarkIsNotReady(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(dir+"/"+SocketDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	path := SocketPath(dir)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	// Bound, never listening: connect is refused, as on a dead server's file.
	if err := os.Chmod(path, 0o666|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ready, _, err := NewClient(dir).Ready(ctx, time.Second)
	if ready || !Unavailable(err) {
		t.Fatalf("Ready on a stale marked socket: %v %v; want no supervisor", ready, err)
	}
}

// With a list of allowed uids the socket is never marked, so that a client
// outside the list is refused by its request instead of told the proxy is
// ready by the mark.
func TestNoReadyMarkUnderAllowedUIDs(t *testing.T) {
	s, c := serve(t, newBackend(), []uint32{4242})
	s.MarkReady(true)
	if fi, err := os.Lstat(s.Path()); err != nil || fi.Mode()&os.ModeSticky != 0 {
		t.Fatalf("socket mode %v (%v) under --allowed-uids", fi.Mode(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ready, _, err := c.Ready(ctx, time.Second); ready || !Rejected(err) {
		t.Fatalf("Ready of a uid outside --allowed-uids: %v %v; want refused", ready, err)
	}
}

// The mark counts only in a socket directory that no uid but the
// supervisor's can change: in one that others may write, or behind a
// symlink, what control.sock names could change between the mark's read
// and the connect, so Ready asks instead.
func TestReadyMarkNeedsASocketDirOnlyTheSupervisorChanges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alter func(t *testing.T, sockDir string)
	}{
		{"writable by all", func(t *testing.T, sockDir string) {
			if err := os.Chmod(sockDir, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"behind a symlink", func(t *testing.T, sockDir string) {
			moved := filepath.Join(filepath.Dir(sockDir), "real")
			if err := os.Rename(sockDir, moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, sockDir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend()
			s, c := serve(t, b, nil)
			s.MarkReady(true)
			tc.alter(t, filepath.Dir(s.Path()))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if ready, _, err := c.Ready(ctx, 50*time.Millisecond); ready || err != nil {
				t.Fatalf("Ready: %v %v; want the backend's not ready", ready, err)
			}
			if n := b.waits.Load(); n != 1 {
				t.Fatalf("the backend was asked %d times, want once: the mark must not answer", n)
			}
		})
	}
}
