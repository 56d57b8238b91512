package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// plant fills the pod's peers/ with n files of uid, with valid peer names,
// as any container of the pod can (peers/ is mode 01777).
func plant(tb testing.TB, dir string, n, uid int) {
	tb.Helper()
	d := peers.Open(dir)
	if err := d.Create(); err != nil {
		tb.Fatal(err)
	}
	err := asUID(uid, func() error {
		for i := range n {
			fd, err := unix.Open(filepath.Join(d.Path(), fmt.Sprint("planted-", i)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return err
			}
			unix.Close(fd)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// cpuShare is pid's CPU over d, as a share of one CPU.
func cpuShare(tb testing.TB, pid int, d time.Duration) float64 {
	tb.Helper()
	c0, err := procCPU(pid)
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(d) // the span measured
	c1, err := procCPU(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return (c1 - c0).Seconds() / time.Since(t0).Seconds()
}

// 50,000 files of a uid that --allowed-uids refuses cost the supervisor
// next to nothing: a rescan reads at most NameLimit entries of peers/,
// skipped ones included, and says what it skipped in one line. The app's
// completion, behind them in the directory, still ends the job. (Every
// rescan opened all 50,000: 92-104% of a CPU, 26 MB, POSTs waiting 862 ms
// and a log line per file.)
func TestPlantedFilesCostLittle(t *testing.T) {
	p := newPod(t)
	emptyDir(t, p)
	plant(t, p.dir, 50000, 1001)
	sup := p.supervise([]string{"--allowed-uids", "0"})
	p.waitHTTP(readyURL, 200, soon)
	if cpu := cpuShare(t, sup.Cmd.Process.Pid, 3*time.Second); cpu > 0.1 {
		t.Fatalf("the supervisor used %.0f%% of a CPU over three rescans of planted files, want under 10%%", 100*cpu)
	}
	if n := strings.Count(sup.Out.String(), "record skipped") + strings.Count(sup.Out.String(), "records skipped"); n != 1 {
		t.Fatalf("%d log lines of skipped records, want one summary", n)
	}
	if code := p.app("app", nil, "exit 0").Exit(soon); code != 0 {
		t.Fatalf("app exit %d", code)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want the app's 0:\n%s", code, sup.Out.String())
	}
}
