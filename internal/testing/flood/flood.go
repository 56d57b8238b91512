// Package flood is a slow-header attacker for tests, and the kubelet-like
// probes that measure a server under it. The attacker's connections trickle
// the bytes of an HTTP request's header and never finish it, each replaced
// as soon as the server closes it. The load is bounded, so that a test of
// it finishes in seconds and leaves the machine's CPU to the server.
package flood

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Bounds on the load: one byte per connection per byteEvery, and a pause
// before each new connection.
const (
	byteEvery = 100 * time.Millisecond
	redial    = 20 * time.Millisecond
)

// SlowHeaders holds n connections made by dial that trickle header bytes,
// until ctx ends. The returned wait blocks until every connection is
// closed.
func SlowHeaders(ctx context.Context, dial func(context.Context) (net.Conn, error), n int) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if c, err := dial(ctx); err == nil {
					trickle(ctx, c)
				}
				sleep(ctx, redial)
			}
		})
	}
	return wg.Wait
}

// trickle writes one byte of a header that never ends every byteEvery, until
// the server closes c or ctx ends.
func trickle(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	head := []byte("GET /healthz/ready HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	for i := 0; ctx.Err() == nil; i++ {
		b := []byte{'a'}
		if i < len(head) {
			b = head[i : i+1]
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(b); err != nil {
			return
		}
		sleep(ctx, byteEvery)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Probes sends n GETs the way the kubelet probes, one every `every`, each
// on a new connection of client (which should not keep connections alive
// and should carry the probe's timeout), to urls in turn. It returns each
// probe's latency, and its error: a transport error or a status other than
// 200.
func Probes(client *http.Client, urls []string, n int, every time.Duration) ([]time.Duration, []error) {
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		url := urls[i%len(urls)]
		wg.Go(func() {
			start := time.Now()
			resp, err := client.Get(url)
			lat[i] = time.Since(start)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s: %s", url, resp.Status)
				}
			}
			errs[i] = err
		})
		time.Sleep(every)
	}
	wg.Wait()
	return lat, errs
}
