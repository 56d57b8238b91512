package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Another uid that can write in the control dir races to rename a symlink
// over the socket between its bind and its chmod. Whatever the symlink
// names must keep its mode: the supervisor never chmods through a path
// someone else can redirect. The attacker here is root, which can write in
// the socket's own directory too, so it is stronger than any peer.
func TestListenNeverChmodsThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := NewClient(dir).Path()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		tmp := filepath.Join(filepath.Dir(path), ".evil")
		for ctx.Err() == nil {
			os.Remove(tmp)
			if os.Symlink(secret, tmp) != nil {
				continue
			}
			os.Rename(tmp, path)
			os.Remove(path) // make way for the next bind
		}
	})
	log := slog.New(slog.DiscardHandler)
	served := 0
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
		if s, err := listenIn(dir, newBackend(), nil, log); err == nil {
			served++
			s.Close()
		}
		fi, err := os.Stat(secret)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("after %d tries the secret's mode is %v: the socket's chmod followed a symlink", i+1, fi.Mode().Perm())
		}
	}
	t.Logf("%d of the tries served", served)
}

// The socket lives in a directory only the supervisor's uid can write, and
// a control dir that every uid can write becomes sticky, so that no other
// uid can rename that directory away (root can do both).
func TestSocketDirIsTheSupervisors(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	s, _ := serveIn(t, dir, newBackend(), nil)
	for path, want := range map[string]os.FileMode{
		dir:                    0o777 | os.ModeSticky,
		filepath.Dir(s.Path()): 0o755,
		s.Path():               0o666,
	} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
}

// A socket directory that another uid made is its, not ours: the
// supervisor refuses it rather than serving where that uid can replace it.
func TestSocketDirOfAnotherUIDIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the directory away")
	}
	dir := t.TempDir()
	sd := filepath.Join(dir, SocketDir)
	if err := os.Mkdir(sd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sd, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	_, err := listenIn(dir, newBackend(), nil, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "owned by uid 1000") {
		t.Fatalf("Listen in a directory of uid 1000: %v", err)
	}
}

// A client refuses a server whose uid it does not trust, with one line
// that names the uid and how to allow it.
func TestClientRefusesAnUntrustedServer(t *testing.T) {
	s, _ := serve(t, newBackend(), nil)
	_, err := dialTrusted(context.Background(), s.Path(), []uint32{4242})
	var u *UntrustedError
	if !errors.As(err, &u) || u.UID != uint32(os.Geteuid()) {
		t.Fatalf("dial a server of uid %d trusting only 4242: %v", os.Geteuid(), err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, fmt.Sprintf("--supervisor-uid %d", u.UID)) {
		t.Errorf("error %q: want one line naming the flag and the uid", msg)
	}
	c, err := dialTrusted(context.Background(), s.Path(), []uint32{uint32(os.Geteuid())})
	if err != nil {
		t.Fatalf("dial a trusted server: %v", err)
	}
	c.Close()
}
