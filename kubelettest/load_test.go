package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// load is a mesh client of a Service, in the node's network namespace: it
// watches the Service's EndpointSlices and sends each request to one of the
// endpoints they list as ready, at a steady rate, half on kept-alive
// connections and half on new ones, and counts every failure by kind.
type load struct {
	c        *cluster
	service  string
	port     int32
	rate     time.Duration // between two requests
	path     func(i int) string
	keep     *http.Client
	fresh    *http.Client
	start    time.Time
	mu       sync.Mutex
	slices   map[string][]string // each slice's ready endpoints
	sent, ok int
	failures map[string]int
	examples []string
	// keepSent are the requests sent on kept-alive connections, keepDials
	// the connections they made: a close hint that sends a client back to
	// a pod still in its endpoints costs a new connection per request.
	keepSent, keepDials atomic.Int64
}

func newLoad(c *cluster, service string, port int32, rate time.Duration, path func(int) string) *load {
	l := &load{c: c, service: service, port: port, rate: rate, path: path, slices: map[string][]string{}, failures: map[string]int{}}
	client := func(keepAlive bool) *http.Client {
		dial := theNode.netns().Dial
		if keepAlive {
			dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				l.keepDials.Add(1)
				return theNode.netns().Dial(ctx, network, addr)
			}
		}
		return &http.Client{
			Timeout: 20 * time.Second,
			Transport: &http.Transport{
				DialContext:         dial,
				DisableKeepAlives:   !keepAlive,
				MaxIdleConnsPerHost: 4,
			},
		}
	}
	l.keep, l.fresh = client(true), client(false)
	return l
}

// ready are the endpoints the slices list as ready.
func (l *load) ready() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []string
	for _, eps := range l.slices {
		all = append(all, eps...)
	}
	sort.Strings(all)
	return all
}

// watch follows the Service's EndpointSlices until ctx ends.
func (l *load) watch(ctx context.Context) {
	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + l.service}
	for ctx.Err() == nil {
		list, err := l.c.client.DiscoveryV1().EndpointSlices("default").List(ctx, sel)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		clear(l.slices)
		for i := range list.Items {
			l.slices[list.Items[i].Name] = readyEndpoints(&list.Items[i], l.port)
		}
		l.mu.Unlock()
		opts := sel
		opts.ResourceVersion = list.ResourceVersion
		w, err := l.c.client.DiscoveryV1().EndpointSlices("default").Watch(ctx, opts)
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				break // an error: list again
			}
			l.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(l.slices, s.Name)
			} else {
				l.slices[s.Name] = readyEndpoints(s, l.port)
			}
			l.mu.Unlock()
		}
		w.Stop()
	}
}

// readyEndpoints are the slice's ready endpoints as ADDR:PORT: a
// terminating endpoint is not ready, whether it still serves or not.
func readyEndpoints(s *discoveryv1.EndpointSlice, port int32) []string {
	var eps []string
	for _, e := range s.Endpoints {
		if e.Conditions.Ready == nil || !*e.Conditions.Ready {
			continue
		}
		for _, a := range e.Addresses {
			eps = append(eps, fmt.Sprintf("%s:%d", a, port))
		}
	}
	return eps
}

// run sends requests until ctx ends, then waits for those in flight.
func (l *load) run(ctx context.Context) {
	var wg sync.WaitGroup
	l.start = time.Now()
	tick := time.NewTicker(l.rate)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		eps := l.ready()
		if len(eps) == 0 {
			l.fail("no ready endpoint", "")
			continue
		}
		client := l.keep
		if i%2 == 1 {
			client = l.fresh
		} else {
			l.keepSent.Add(1)
		}
		url := "http://" + eps[rand.IntN(len(eps))] + l.path(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.send(client, url)
		}()
	}
}

func (l *load) send(client *http.Client, url string) {
	resp, err := client.Get(url)
	if err != nil {
		l.fail(failureKind(err), fmt.Sprintf("%s: %v", url, err))
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		l.fail(failureKind(err), fmt.Sprintf("%s: body: %v", url, err))
	case resp.StatusCode >= 500:
		l.fail("5xx", fmt.Sprintf("%s: %s %q", url, resp.Status, body))
	case resp.StatusCode != http.StatusOK:
		l.fail(resp.Status, url)
	default:
		l.mu.Lock()
		l.sent++
		l.ok++
		l.mu.Unlock()
	}
}

func failureKind(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "connection refused"):
		return "connection refused"
	case strings.Contains(s, "reset by peer"):
		return "reset"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(s, "Timeout"):
		return "timeout"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(s, "EOF"):
		return "closed (EOF)"
	default:
		return "other"
	}
}

func (l *load) fail(kind, example string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	l.failures[kind]++
	if example != "" && len(l.examples) < 10 {
		l.examples = append(l.examples, fmt.Sprintf("at %s: %s", time.Since(l.start).Round(time.Millisecond), example))
	}
}

// counts are the requests sent, those that succeeded and the failures by
// kind.
func (l *load) counts() (sent, ok int, failures map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.ok, maps.Clone(l.failures)
}

// failed is the number of failed requests, and their kinds.
func (l *load) failed() (int, string) {
	_, _, f := l.counts()
	n := 0
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(f)) {
		n += f[k]
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, f[k]))
	}
	return n, strings.Join(kinds, ", ")
}
