package proctest

import (
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// Until polls cond until it holds or d passes, and reports whether it held.
// The first polls come fast, so that a test is not slower than the state it
// waits for; later ones back off to spare the CPU.
func Until(d time.Duration, cond func() bool) bool {
	return until(d, 20*time.Millisecond, cond)
}

// Poll calls f until it returns nil or d passes, and returns its last
// error: for a check that fails with its reason, such as a request to a
// server. Its polls back off further than Until's, to 100ms, since each may
// cost the server under test a request.
func Poll(d time.Duration, f func() error) error {
	var err error
	until(d, 100*time.Millisecond, func() bool { err = f(); return err == nil })
	return err
}

func until(d, most time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	every := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(min(every, time.Until(deadline)+time.Millisecond))
		every = min(2*every, most)
	}
	return true
}

// Eventually polls cond until it holds; the test fails if it does not
// within d. what says what was awaited.
func Eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Until(d, cond) {
		tb.Fatalf("%s: not within %v", what, d)
	}
}

// ports are the ports FreePort has handed out: package state, because two
// tests of one test binary must never get the same one.
var ports struct {
	mu   sync.Mutex
	used map[uint16]bool
}

// FreePort is a TCP port of 127.0.0.1 that was free when asked, and that no
// other caller in this test binary gets. Another process may still take it
// before the test binds it; a test in its own network namespace has no such
// race and needs no FreePort.
func FreePort(tb testing.TB) uint16 {
	tb.Helper()
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.used == nil {
		ports.used = make(map[uint16]bool)
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		p := uint16(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		if !ports.used[p] {
			ports.used[p] = true
			return p
		}
	}
	tb.Fatal("no free port")
	return 0
}

// ShortDir is a temp dir with a short path, removed when the test ends: a
// unix socket's path must fit in sun_path (108 bytes), which t.TempDir(),
// named after the test and its subtest, may exceed.
func ShortDir(tb testing.TB) string {
	tb.Helper()
	d, err := os.MkdirTemp("", "pt")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}
