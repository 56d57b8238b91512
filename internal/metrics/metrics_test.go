package metrics

import (
	"strings"
	"sync"
	"testing"
)

func TestExposition(t *testing.T) {
	r := NewRegistry()
	up := r.Gauge("proxy_up", "Whether the proxy runs.")
	exits := r.CounterVec("proxy_exits_total", "Proxy exits by code.", "code")
	r.GaugeFunc("answer", "Computed at scrape time.", func() float64 { return 42 })
	peers := r.CounterVec("peer_completions_total", "Completions, \"by\" peer\\reason\nand more.", "peer", "reason")

	up.Set(1)
	exits.With("143").Inc()
	exits.With("0").Add(2)
	peers.With(`we"ird\name`+"\n", "exited").Inc()

	var b strings.Builder
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	want := `# HELP proxy_up Whether the proxy runs.
# TYPE proxy_up gauge
proxy_up 1
# HELP proxy_exits_total Proxy exits by code.
# TYPE proxy_exits_total counter
proxy_exits_total{code="0"} 2
proxy_exits_total{code="143"} 1
# HELP answer Computed at scrape time.
# TYPE answer gauge
answer 42
# HELP peer_completions_total Completions, "by" peer\\reason\nand more.
# TYPE peer_completions_total counter
peer_completions_total{peer="we\"ird\\name\n",reason="exited"} 1
`
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestConcurrentAdd(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("n", "n")
	v := r.CounterVec("m", "m", "k")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				c.Inc()
				v.With("a").Add(0.5)
			}
		}()
	}
	wg.Wait()
	if c.Get() != 8000 || v.With("a").Get() != 4000 {
		t.Fatalf("lost updates: %v %v", c.Get(), v.With("a").Get())
	}
}

func TestWrongLabelCountPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("want a panic for a wrong label count")
		}
	}()
	NewRegistry().CounterVec("x", "x", "a", "b").With("only-one")
}
