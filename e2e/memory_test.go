package e2e

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/proctest"
)

// TestMemoryReturnsAfterBurst: a burst of keep-alive requests on
// /healthz/ready grows the supervisor's heap and goroutine stacks; within a
// minute of its end at least a third of that growth must be handed back,
// instead of staying resident for the pod's life. (Only part of it can be:
// the runtime's metadata for the grown heap stays; docs/benchmarks.md.)
func TestMemoryReturnsAfterBurst(t *testing.T) {
	if proctest.Race {
		// The race detector's shadow memory swamps what is measured here;
		// make test runs e2e once more with the binaries as shipped.
		t.Skip("the supervisor is race-built")
	}
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil)
	p.waitHTTP(readyURL, 200, 10*time.Second)
	idle, err := procStatusKB(sup.Pid(), "RssAnon")
	if err != nil {
		t.Fatal(err)
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: p.dial, MaxIdleConnsPerHost: 32}}
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				resp, err := client.Get(readyURL)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	client.CloseIdleConnections()
	peak, err := procStatusKB(sup.Pid(), "RssAnon")
	if err != nil {
		t.Fatal(err)
	}
	growth := peak["RssAnon"] - idle["RssAnon"]
	if growth < 512 {
		t.Skipf("the burst grew RssAnon by only %.0f kB; nothing to observe", growth)
	}
	want := peak["RssAnon"] - growth/3
	var anon float64
	back := func() bool {
		st, err := procStatusKB(sup.Pid(), "RssAnon")
		if err != nil {
			return true
		}
		anon = st["RssAnon"]
		return anon <= want
	}
	if !proctest.Until(60*time.Second, back) {
		t.Fatalf("RssAnon %.0f kB a minute after the burst (idle %.0f kB, %.0f kB at its end), want <= %.0f kB", anon, idle["RssAnon"], peak["RssAnon"], want)
	}
	fmt.Printf("memory: RssAnon idle %.0f kB, %.0f kB at the burst's end, %.0f kB after\n", idle["RssAnon"], peak["RssAnon"], anon)
}
