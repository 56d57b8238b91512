package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// supervisor is a control socket whose proxy is ready when ready is
// closed, and which keeps the completions it is told; its control dir
// holds peers/, as a supervisor's does.
type supervisor struct {
	dir     string
	ready   chan struct{}
	asked   chan struct{} // closed at the first readiness request
	once    sync.Once
	mu      sync.Mutex
	told    []control.Completion
	records peers.Dir
}

func newSupervisor(t *testing.T, ready bool) *supervisor {
	t.Helper()
	s := &supervisor{dir: proctest.ShortDir(t), ready: make(chan struct{}), asked: make(chan struct{})}
	if ready {
		close(s.ready)
	}
	s.records = peers.Open(s.dir)
	if err := s.records.Create(); err != nil {
		t.Fatal(err)
	}
	srv := control.New(s.dir, s, nil, slog.New(slog.DiscardHandler))
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *supervisor) WaitReady(ctx context.Context) (bool, string) {
	s.once.Do(func() { close(s.asked) })
	select {
	case <-s.ready:
		return true, ""
	case <-ctx.Done():
		return false, "Envoy is INITIALIZING"
	}
}

func (s *supervisor) Complete(_ context.Context, c control.Completion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.told = append(s.told, c)
	return nil
}

func (s *supervisor) Drain(context.Context) (bool, string) { return true, control.Drained }
func (s *supervisor) Status() control.Status               { return control.Status{State: "ready", Ready: true} }

func (s *supervisor) completions() []control.Completion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]control.Completion(nil), s.told...)
}

// record is the final record of peer name in peers/.
func (s *supervisor) record(t *testing.T, name string) peers.Record {
	t.Helper()
	recs, errs := s.records.Load(nil)
	if len(errs) > 0 {
		t.Fatalf("load records: %v", errs)
	}
	rec, ok := recs[name]
	if !ok {
		t.Fatalf("no record of %s in %v", name, recs)
	}
	return rec
}

func (s *supervisor) peer(name string) Peer { return Peer{Socket{Dir: s.dir}, name} }

// exec runs Exec in the background; its code arrives on the channel.
func (s *supervisor) exec(name string, command ...string) (<-chan int, *proctest.Buffer) {
	stderr := &proctest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- Exec(s.peer(name), command, 30*time.Second, Hooks{}, stderr) }()
	return done, stderr
}

func waitCode(t *testing.T, done <-chan int, stderr *proctest.Buffer) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("exec did not end; stderr:\n%s", stderr.String())
		return 0
	}
}

// exec runs COMMAND once the proxy is ready, exits with its code, records
// that code durably and tells the supervisor.
func TestExecRecordsTheCommandsEnd(t *testing.T) {
	s := newSupervisor(t, true)
	done, stderr := s.exec("job", "/bin/sh", "-c", "exit 3")
	if code := waitCode(t, done, stderr); code != 3 {
		t.Fatalf("exit %d, want 3; stderr:\n%s", code, stderr.String())
	}
	if rec := s.record(t, "job"); rec.ExitCode != 3 || rec.Reason != peers.Exited || !rec.Stop.IsZero() {
		t.Errorf("record %+v, want exit 3, exited, no stop", rec)
	}
	if c := s.completions(); len(c) != 1 || c[0].Peer != "job" || c[0].Code != 3 {
		t.Errorf("the supervisor was told %+v, want job's exit 3", c)
	}
}

// A COMMAND that cannot start is 127 (not found) as a shell says it, and
// recorded so; one killed by a signal is 128+N and recorded as signaled.
func TestExecCodesAsAShellGivesThem(t *testing.T) {
	s := newSupervisor(t, true)
	for _, tt := range []struct {
		name    string
		command []string
		code    int
		reason  peers.Reason
	}{
		{"missing", []string{"/nonexistent/job"}, 127, peers.Exited},
		{"killed", []string{"/bin/sh", "-c", "kill -KILL $$"}, 137, peers.Signaled},
	} {
		done, stderr := s.exec(tt.name, tt.command...)
		if code := waitCode(t, done, stderr); code != tt.code {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", tt.name, code, tt.code, stderr.String())
		}
		if rec := s.record(t, tt.name); rec.ExitCode != tt.code || rec.Reason != tt.reason {
			t.Errorf("%s: record %+v, want %d, %s", tt.name, rec, tt.code, tt.reason)
		}
	}
}

// A stop signal that exec gets goes to COMMAND, and goes with its end as
// the evidence of a stop from outside (the deletion race's evidence).
func TestExecForwardsAStopAndRecordsIt(t *testing.T) {
	s := newSupervisor(t, true)
	started := filepath.Join(t.TempDir(), "started")
	done, stderr := s.exec("job", "/bin/sh", "-c", `trap 'exit 7' TERM; touch "$0"; while :; do sleep 0.01; done`, started)
	proctest.Eventually(t, 10*time.Second, "COMMAND runs", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	if code := waitCode(t, done, stderr); code != 7 {
		t.Fatalf("exit %d, want COMMAND's 7; stderr:\n%s", code, stderr.String())
	}
	if rec := s.record(t, "job"); rec.ExitCode != 7 || rec.Stop.Signal != "SIGTERM" || rec.Stop.At.IsZero() {
		t.Errorf("record %+v, want exit 7 with the SIGTERM as its stop", rec)
	}
}

// A stop signal while exec waits for the proxy ends the wait: COMMAND
// never runs, and the end is recorded as signaled with the signal's code.
func TestExecStoppedWhileWaitingDoesNotRun(t *testing.T) {
	s := newSupervisor(t, false)
	ran := filepath.Join(t.TempDir(), "ran")
	done, stderr := s.exec("job", "/bin/touch", ran)
	select {
	case <-s.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("exec never asked for readiness")
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	if code := waitCode(t, done, stderr); code != 143 {
		t.Fatalf("exit %d, want 143; stderr:\n%s", code, stderr.String())
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("COMMAND ran")
	}
	if rec := s.record(t, "job"); rec.ExitCode != 143 || rec.Reason != peers.Signaled || rec.Stop.Signal != "SIGTERM" {
		t.Errorf("record %+v, want 143, signaled by SIGTERM", rec)
	}
	if !strings.Contains(stderr.String(), "SIGTERM while waiting for the proxy; not running /bin/touch") {
		t.Errorf("stderr %q does not say why COMMAND did not run", stderr.String())
	}
}

// A proxy not ready within the timeout: exec records not-ready and exits
// 69 without running COMMAND, with the supervisor's last reason.
func TestExecNotReadyInTime(t *testing.T) {
	s := newSupervisor(t, false)
	ran := filepath.Join(t.TempDir(), "ran")
	var stderr bytes.Buffer
	code := Exec(s.peer("job"), []string{"/bin/touch", ran}, 2*time.Second, Hooks{}, &stderr)
	if code != peers.NotReadyCode || !strings.Contains(stderr.String(), "Envoy is INITIALIZING") {
		t.Fatalf("exit %d, want %d with the supervisor's reason; stderr:\n%s", code, peers.NotReadyCode, stderr.String())
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("COMMAND ran")
	}
	if rec := s.record(t, "job"); rec.ExitCode != peers.NotReadyCode || rec.Reason != peers.NotReady {
		t.Errorf("record %+v, want not-ready", rec)
	}
}

// A peers/ that is not the supervisor's (planted as a symlink) takes no
// record: the completion goes over the socket alone, and complete still
// succeeds once the supervisor takes it.
func TestCompleteOverTheSocketWhenPeersIsNotTheSupervisors(t *testing.T) {
	s := newSupervisor(t, true)
	path := s.records.Path()
	if err := os.Rename(path, path+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(path+".real", path); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := Complete(s.peer("uploader"), 4, 10*time.Second, &stderr); code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr.String())
	}
	if c := s.completions(); len(c) != 1 || c[0].Peer != "uploader" || c[0].Code != 4 {
		t.Errorf("the supervisor was told %+v, want uploader's exit 4", c)
	}
	if !strings.Contains(stderr.String(), "took the completion of uploader (exit 4) over the socket") {
		t.Errorf("stderr %q does not say the completion went over the socket", stderr.String())
	}
}

// complete waits for a supervisor that has never run to create peers/,
// and records there once it does.
func TestCompleteWaitsForPeersToExist(t *testing.T) {
	dir := proctest.ShortDir(t)
	stderr := &proctest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- Complete(Peer{Socket{Dir: dir}, "job"}, 0, 30*time.Second, stderr) }()
	proctest.Eventually(t, 10*time.Second, "complete says it waits", func() bool {
		return strings.Contains(stderr.String(), "waiting for the supervisor to create")
	})
	records := peers.Open(dir)
	if err := records.Create(); err != nil {
		t.Fatal(err)
	}
	if code := waitCode(t, done, stderr); code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr.String())
	}
	recs, errs := records.Load(nil)
	if rec, ok := recs["job"]; !ok || rec.ExitCode != 0 || len(errs) > 0 {
		t.Errorf("records %v (%v), want job's exit 0", recs, errs)
	}
}

// status prints the supervisor's state as indented JSON.
func TestStatusPrintsIndentedJSON(t *testing.T) {
	s := newSupervisor(t, true)
	var stdout, stderr bytes.Buffer
	want, _ := json.MarshalIndent(s.Status(), "", "  ")
	if code := Status(Socket{Dir: s.dir}, &stdout, &stderr); code != 0 || stdout.String() != string(want)+"\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want stdout %q", code, stdout.String(), stderr.String(), want)
	}
}
