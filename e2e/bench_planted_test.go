package e2e

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
)

// BenchmarkPlantedFiles measures what 50,000 files of a uid that
// --allowed-uids refuses cost a ready supervisor (issue 16): its CPU over
// ten rescans, its VmRSS, and the latency of POST /v1/complete (under
// --restart-policy Always, so that each one settles the verdict and is
// confirmed by a full read of the records, and nothing stops).
func BenchmarkPlantedFiles(b *testing.B) {
	useBenchBins(b)
	for range b.N {
		p := newPod(b)
		emptyDir(b, p)
		plant(b, p.dir, 50000, 1001)
		sup := p.supervise([]string{"--allowed-uids", "0", "--restart-policy", "Always"})
		p.waitHTTP(readyURL, 200, soon)
		pid := sup.Cmd.Process.Pid
		cpu := cpuShare(b, pid, 10*time.Second)
		c := control.NewClient(p.dir)
		var lat []float64
		for range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t0 := time.Now()
			err := c.Complete(ctx, control.Completion{Peer: "app", Code: 0})
			lat = append(lat, millis(time.Since(t0)))
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		slices.Sort(lat)
		kb, err := procStatusKB(pid, "VmRSS")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(100*cpu, "cpu-%")
		b.ReportMetric(kb["VmRSS"], "VmRSS-kB")
		b.ReportMetric(lat[len(lat)/2], "post-p50-ms")
		b.ReportMetric(lat[len(lat)-1], "post-max-ms")
		fmt.Printf("planted files: CPU %.1f%% of one, VmRSS %.0f kB, POST /v1/complete p50 %.2f ms, max %.2f ms\n",
			100*cpu, kb["VmRSS"], lat[len(lat)/2], lat[len(lat)-1])
		sup.Signal(syscall.SIGTERM)
		sup.Exit(soon)
	}
}
