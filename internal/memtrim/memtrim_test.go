package memtrim

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

var sink [][]byte

// pageCache is what each P may keep of free pages that neither a collection
// nor FreeOSMemory hands back while the P runs: the runtime's per-P page
// cache, 64 pages of 8 KiB. The test reads the floor that leaves.
const pageCache = 64 * 8 << 10

// A burst's garbage, once collected, is free but resident; the trimmer must
// release it within a few checks.
func TestReleasesFreeHeapAfterBurst(t *testing.T) {
	for range 1024 {
		sink = append(sink, make([]byte, 8<<10))
	}
	sink = nil
	runtime.GC()
	sample := NewSample()
	if f := Free(sample); f <= 4<<20 {
		t.Skipf("the burst left only %d free bytes; nothing to observe", f)
	}
	stop := Start(10*time.Millisecond, DefaultSlack)
	defer stop()
	floor := DefaultSlack + uint64(runtime.GOMAXPROCS(0))*pageCache
	if !proctest.Until(5*time.Second, func() bool { return Free(sample) <= floor }) {
		t.Fatalf("still %d free bytes resident after 5 s", Free(sample))
	}
}

// forcedGCs counts the collections forced so far (runtime.GC and
// debug.FreeOSMemory): two a trim.
func forcedGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestStopWaits(t *testing.T) {
	// Free heap for the first checks to trim, with a slack of 0.
	sink = append(sink, make([]byte, 1<<20))
	sink = nil
	runtime.GC()
	before := forcedGCs()
	stop := Start(time.Millisecond, 0)
	proctest.Eventually(t, 5*time.Second, "a trim under way", func() bool { return forcedGCs() > before })
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return within 5 s")
	}
}
