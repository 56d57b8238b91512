package control

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// callerEnv makes the test binary a drain's caller, as `prestop` is: it asks
// the control dir named by the variable for a drain, says "answered", and
// exits when its stdin ends.
const callerEnv = "CONTROL_TEST_DRAIN_CALLER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(callerEnv); dir != "" {
		_, why, err := NewClient(dir).Drain(context.Background(), time.Minute)
		fmt.Printf("answered %q %v\n", why, err)
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// caller starts a drain's caller on the control dir dir, and returns once
// it has its answer; closing stdin lets it exit.
func caller(t *testing.T, dir string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), callerEnv+"="+dir)
	stdin, stdout := proctest.Piped(t, cmd)
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "answered") {
		t.Fatalf("the caller said %q (%v), want its answer", line, err)
	}
	return cmd, stdin
}

// logLines is a slog handler's writer that hands each line to a channel.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

// A preStop hook answered just before the supervisor stops would be killed
// with the proxy container before it exits, and the kubelet would report
// FailedPreStopHook on a termination that went as designed: Close lets
// the drain's callers exit first.
func TestCloseWaitsForDrainCallers(t *testing.T) {
	dir := t.TempDir()
	b := newBackend()
	close(b.drained)
	logs := make(logLines, 16)
	s, err := listenIn(dir, b, nil, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	s.hookExit = 10 * time.Minute // the caller's exit, however slow the machine, ends the wait
	go s.Serve()
	cmd, stdin := caller(t, dir)

	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	for waiting := false; !waiting; {
		select {
		case line := <-logs:
			waiting = strings.Contains(line, "waiting for the processes that asked for a drain")
		case <-closed:
			t.Fatal("Close returned while the drain's caller still ran")
		}
	}
	stdin.Close()
	<-closed
	// Not reaped yet: a caller that has exited is a zombie, one that has
	// not is still running.
	var ws unix.WaitStatus
	if pid, err := unix.Wait4(cmd.Process.Pid, &ws, unix.WNOHANG, nil); pid != cmd.Process.Pid {
		t.Fatalf("Close returned before the drain's caller exited (wait4: %d, %v)", pid, err)
	}
}

// A caller that does not exit holds Close for its bound, no longer.
func TestCloseWaitsForDrainCallersWithinItsBound(t *testing.T) {
	dir := t.TempDir()
	b := newBackend()
	close(b.drained)
	logs := make(logLines, 16)
	s, err := listenIn(dir, b, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.hookExit = 50 * time.Millisecond
	go s.Serve()
	cmd, _ := caller(t, dir)
	s.Close()
	if err := cmd.Process.Signal(unix.Signal(0)); err != nil {
		t.Fatalf("the caller is gone: %v; the test needs one that outlives the bound", err)
	}
	var warned bool
	for len(logs) > 0 {
		warned = warned || strings.Contains(<-logs, "has not exited; stopping anyway")
	}
	if !warned {
		t.Error("no warning that the drain's caller outlived the bound")
	}
	if len(s.hooks.fds) != 0 {
		t.Errorf("%d pidfds still held after Close", len(s.hooks.fds))
	}
}
