// Package flood is attackers for tests, and the kubelet-like probes that
// measure a server under them: connections that trickle the bytes of an
// HTTP request's header and never finish it, or that send nothing at all,
// each replaced as soon as the server closes it. The load is bounded, so
// that a test of it finishes in seconds and leaves the machine's CPU to the
// server.
package flood

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds on the load: one byte per connection per byteEvery, and a pause
// before each new connection.
const (
	byteEvery = 100 * time.Millisecond
	redial    = 20 * time.Millisecond
)

// Load is a running attack.
type Load struct {
	wg     sync.WaitGroup
	closed atomic.Int64
}

// Wait blocks until every connection of the load is closed, once its
// context has ended.
func (l *Load) Wait() { l.wg.Wait() }

// Closed is how many of the load's connections have ended, the server's
// closes and failed dials among them: once it passes the number of
// clients, the server has had to make room for them.
func (l *Load) Closed() int64 { return l.closed.Load() }

// SlowHeaders holds n connections, client i's made by dial(ctx, i), that
// trickle header bytes, until ctx ends.
func SlowHeaders(ctx context.Context, dial func(ctx context.Context, i int) (net.Conn, error), n int) *Load {
	return hold(ctx, dial, n, trickle)
}

// Silent holds n connections, client i's made by dial(ctx, i), that send
// nothing, until ctx ends.
func Silent(ctx context.Context, dial func(ctx context.Context, i int) (net.Conn, error), n int) *Load {
	return hold(ctx, dial, n, func(ctx context.Context, c net.Conn) {
		c.Read(make([]byte, 1)) // until the server closes it, or ctx ends
	})
}

// hold runs n clients, each with a connection of its own that use is
// given, and a new one after a pause once use returns, until ctx ends.
func hold(ctx context.Context, dial func(ctx context.Context, i int) (net.Conn, error), n int, use func(context.Context, net.Conn)) *Load {
	l := new(Load)
	for i := range n {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				if c, err := dial(ctx, i); err == nil {
					stop := context.AfterFunc(ctx, func() { c.Close() })
					use(ctx, c)
					stop()
					c.Close()
				}
				l.closed.Add(1)
				sleep(ctx, redial)
			}
		})
	}
	return l
}

// trickle writes one byte of a header that never ends every byteEvery, until
// the server closes c or ctx ends.
func trickle(ctx context.Context, c net.Conn) {
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
// on a new connection that send makes and writes req to at once (in a
// network namespace, on the thread that connected: a probe is one write
// right after its connect, and a client process slowed by the flood it
// runs must not make it two), to paths in turn, each answer awaited for
// timeout. It returns each probe's latency, and its error: a transport
// error or a status other than 200.
func Probes(send func(ctx context.Context, req []byte) (net.Conn, error), paths []string, n int, every, timeout time.Duration) ([]time.Duration, []error) {
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		path := paths[i%len(paths)]
		wg.Go(func() {
			start := time.Now()
			errs[i] = probe(send, path, timeout)
			lat[i] = time.Since(start)
		})
		time.Sleep(every)
	}
	wg.Wait()
	return lat, errs
}

// probe is one of Probes: the kubelet's request, on a connection that
// closes after it.
func probe(send func(ctx context.Context, req []byte) (net.Conn, error), path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req := "GET " + path + " HTTP/1.1\r\nHost: probe\r\nUser-Agent: kube-probe/1.37\r\nAccept: */*\r\nConnection: close\r\n\r\n"
	c, err := send(ctx, []byte(req))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	c.SetDeadline(deadline)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

// Send is a Probes send of dial: it connects, then writes req.
func Send(dial func(ctx context.Context) (net.Conn, error)) func(ctx context.Context, req []byte) (net.Conn, error) {
	return func(ctx context.Context, req []byte) (net.Conn, error) {
		c, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := c.Write(req); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}
