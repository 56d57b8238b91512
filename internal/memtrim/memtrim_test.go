package memtrim

import (
	"runtime"
	"testing"
	"time"
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
	deadline := time.Now().Add(5 * time.Second)
	for Free(sample) > floor {
		if time.Now().After(deadline) {
			t.Fatalf("still %d free bytes resident after 5 s", Free(sample))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStopWaits(t *testing.T) {
	stop := Start(time.Millisecond, 0)
	time.Sleep(5 * time.Millisecond) // a few checks under way
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
