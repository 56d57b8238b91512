package e2e

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// A supervisor whose stderr nobody reads (a stalled pipe) still acts on
// SIGTERM after a storm of other signals: it drains, stops the proxy and
// exits 0. (Its signal handler once blocked on the first log line, and the
// SIGTERM that followed 2000 other signals was dropped from a full channel,
// so the kubelet would have had to SIGKILL it at the grace period.)
func TestSigtermAfterAStormWithAStalledLog(t *testing.T) {
	p := newPod(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Fill the pipe, so that the supervisor's first log line blocks.
	size, err := unix.FcntlInt(w.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	// The fake Envoy logs elsewhere: this is about the supervisor's log.
	script := `exec "$0" "$@" >/dev/null 2>&1`
	argv := proctest.Nsenter(p.pause.Process.Pid, []string{"net"},
		bin.supervisor, "supervise", "--control-dir", p.dir, "--health-addr", "127.0.0.1:15022",
		"--drain-min", "0", "--stop-timeout", "2s", "--",
		"/bin/sh", "-c", script, bin.envoy)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan int, 1)
	go func() {
		cmd.Wait()
		done <- exitCode(cmd.ProcessState)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	p.waitHTTP(readyURL, 200, soon)

	// nsenter forwards nothing; signal the supervisor itself.
	sup := supervisorPid(t, cmd.Process.Pid)
	for i := range 2000 {
		sig := []syscall.Signal{syscall.SIGUSR2, syscall.SIGHUP}[i%2]
		if err := syscall.Kill(sup, sig); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(sup, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the supervisor did not act on SIGTERM while its log was stalled")
	}
}

// supervisorPid finds the supervisor under nsenter, which execs it: they
// are the same process once nsenter has entered the namespace.
func supervisorPid(t *testing.T, pid int) int {
	t.Helper()
	var exe string
	if !proctest.Until(5*time.Second, func() bool {
		exe, _ = os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		return exe == bin.supervisor
	}) {
		t.Fatalf("pid %d is %q, not the supervisor", pid, exe)
	}
	return pid
}
