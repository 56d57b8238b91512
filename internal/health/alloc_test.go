package health

import (
	"bufio"
	"bytes"
	"testing"
	"time"
)

// A probe must not allocate: at net/http's 20 objects (2 kB) a probe, a
// burst of probes ran the collector hundreds of times a second, which held
// the probes' tail latency and left resident the runtime's metadata of
// every size class the burst touched.
func TestProbeAllocatesNothing(t *testing.T) {
	addr := serveReady(t)
	c := dial(t, addr)
	req := []byte("GET /healthz/ready HTTP/1.1\r\nHost: 10.0.0.7:15022\r\nUser-Agent: kube-probe/1.37\r\nAccept: */*\r\n\r\n")
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hung server fails the test
	probe := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		for { // the client side reads without allocating too
			line, err := br.ReadSlice('\n')
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(line, []byte("ready\n")) {
				return
			}
		}
	}
	probe() // the connection's goroutine and buffer
	if n := testing.AllocsPerRun(2000, probe); n > 0.05 {
		t.Fatalf("%.2f allocations per probe; want none", n)
	}
}
