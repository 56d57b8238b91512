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
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// load is a mesh client of a Service, in the node's network namespace: it
// watches the Service's EndpointSlices and sends each request to one of the
// endpoints they list as ready, at a steady rate, half on kept-alive
// connections and half on new ones, and counts every failure by kind.
type load struct {
	c       *cluster
	service string
	port    int32
	rate    time.Duration // between two requests
	// lag is how late the client follows the EndpointSlices: the time a
	// kube-proxy or a mesh takes to follow the API, in which a pod whose
	// deletion has begun is still among its ready endpoints.
	lag      time.Duration
	path     func(i int) string
	keep     *http.Client
	fresh    *http.Client
	start    time.Time
	mu       sync.Mutex
	slices   map[string]*discoveryv1.EndpointSlice
	sent, ok int
	failures map[string]int
	examples []string
	// noneReady are the moments the slices listed no ready endpoint, each
	// with the endpoints they listed and the node's load then: what
	// explains it (a probe's failure, and why).
	noneReady []*unreadyMoment
	// keepSent are the requests sent on kept-alive connections, keepDials
	// the connections they made: a close hint that sends a client back to
	// a pod still in its endpoints costs a new connection per request.
	keepSent, keepDials atomic.Int64
	// keepWasted are those of keepDials made to a pod whose deletion had
	// begun (deleting, kept by watchDeletions): that pod was still among
	// the client's ready endpoints, so the connection was made because a
	// close hint ended the last one (or the kept ones were all busy), the
	// waste --drain-delay exists to remove. wastedLast is the longest one
	// came after its pod's deletion: how long the client kept a deleting
	// pod among its ready endpoints.
	keepWasted int
	wastedLast time.Duration
	deleting   map[string]deletion // by pod IP
}

// deletion is when the suite saw a pod's deletion begin: its watch's
// first sight of the pod's deletionTimestamp, not that field's value
// (the request's time plus the grace period, in whole seconds).
type deletion struct {
	pod  types.UID
	seen time.Time
}

// unreadyMoment is a stretch of ticks that found no ready endpoint.
type unreadyMoment struct {
	at, last  time.Duration // since the load's start
	endpoints string
	load      string
}

func newLoad(c *cluster, service string, port int32, rate time.Duration, path func(int) string) *load {
	l := &load{c: c, service: service, port: port, rate: rate, path: path, slices: map[string]*discoveryv1.EndpointSlice{}, failures: map[string]int{}, deleting: map[string]deletion{}}
	client := func(keepAlive bool) *http.Client {
		dial := theNode.netns().Dial
		if keepAlive {
			dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				l.keepDials.Add(1)
				l.wasted(addr)
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
	for _, s := range l.slices {
		all = append(all, readyEndpoints(s, l.port)...)
	}
	sort.Strings(all)
	return all
}

// endpoints describes every endpoint the slices list, ready or not, with
// its conditions and its pod. l.mu is held.
func (l *load) endpoints() string {
	var all []string
	for _, s := range l.slices {
		for _, e := range s.Endpoints {
			pod := "?"
			if e.TargetRef != nil {
				pod = e.TargetRef.Name
			}
			c := e.Conditions
			all = append(all, fmt.Sprintf("%s %v ready=%v serving=%v terminating=%v", pod, e.Addresses, deref(c.Ready), deref(c.Serving), deref(c.Terminating)))
		}
	}
	sort.Strings(all)
	if len(all) == 0 {
		return "none listed"
	}
	return strings.Join(all, "; ")
}

func deref(b *bool) any {
	if b == nil {
		return "unset"
	}
	return *b
}

// none records a tick that found no ready endpoint: a new moment, or the
// one the previous tick was in.
func (l *load) none(prevNone bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Since(l.start)
	if n := len(l.noneReady); prevNone && n > 0 {
		l.noneReady[n-1].last = now
		return
	}
	avg, _ := os.ReadFile("/proc/loadavg")
	load, _, _ := strings.Cut(string(avg), " ")
	l.noneReady = append(l.noneReady, &unreadyMoment{at: now, last: now, endpoints: l.endpoints(), load: load})
}

// unready describes the moments without a ready endpoint.
func (l *load) unready() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.noneReady {
		out = append(out, fmt.Sprintf("at %s for %s (1-minute load %s): %s", m.at.Round(time.Millisecond), (m.last-m.at).Round(time.Millisecond), m.load, m.endpoints))
	}
	return out
}

// watch follows the Service's EndpointSlices until ctx ends.
func (l *load) watch(ctx context.Context) {
	api := l.c.client.DiscoveryV1().EndpointSlices("default")
	later := l.lagged(ctx)
	follow(ctx, api.List, api.Watch, discoveryv1.LabelServiceName+"="+l.service,
		func(list *discoveryv1.EndpointSliceList) {
			later(func() {
				clear(l.slices)
				for i := range list.Items {
					l.slices[list.Items[i].Name] = &list.Items[i]
				}
			})
		},
		func(ev watch.Event) bool {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				return false
			}
			later(func() {
				if ev.Type == watch.Deleted {
					delete(l.slices, s.Name)
				} else {
					l.slices[s.Name] = s
				}
			})
			return true
		})
}

// lagged returns what makes each change to l.slices, under l.mu, l.lag
// after it was seen, in order, until ctx ends.
func (l *load) lagged(ctx context.Context) func(change func()) {
	type seen struct {
		at     time.Time
		change func()
	}
	q := make(chan seen, 1024)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case c := <-q:
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(c.at.Add(l.lag))):
				}
				l.mu.Lock()
				c.change()
				l.mu.Unlock()
			}
		}
	}()
	return func(change func()) {
		select {
		case q <- seen{time.Now(), change}:
		case <-ctx.Done():
		}
	}
}

// watchDeletions follows the pods that selector picks until ctx ends and
// keeps when each one's deletion was first seen, by its IP (an IP that a
// new pod takes is forgotten).
func (l *load) watchDeletions(ctx context.Context, selector string) {
	api := l.c.client.CoreV1().Pods("default")
	follow(ctx, api.List, api.Watch, selector,
		func(list *corev1.PodList) {
			for i := range list.Items {
				l.podSeen(&list.Items[i])
			}
		},
		func(ev watch.Event) bool {
			p, ok := ev.Object.(*corev1.Pod)
			if ok {
				l.podSeen(p)
			}
			return ok
		})
}

// follow lists what selector picks and hands the list to listed, then
// watches from there and hands each event to changed, until ctx ends; a
// failed call, an event changed refuses (an error) or the watch's end
// lists again.
func follow[L interface{ GetResourceVersion() string }](ctx context.Context,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFrom func(context.Context, metav1.ListOptions) (watch.Interface, error),
	selector string, listed func(L), changed func(watch.Event) bool) {
	sel := metav1.ListOptions{LabelSelector: selector}
	for ctx.Err() == nil {
		got, err := list(ctx, sel)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		listed(got)
		opts := sel
		opts.ResourceVersion = got.GetResourceVersion()
		w, err := watchFrom(ctx, opts)
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if !changed(ev) {
				break
			}
		}
		w.Stop()
	}
}

func (l *load) podSeen(p *corev1.Pod) {
	ip := p.Status.PodIP
	if ip == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	d, known := l.deleting[ip]
	switch {
	case known && d.pod == p.UID:
	case p.DeletionTimestamp != nil:
		l.deleting[ip] = deletion{pod: p.UID, seen: time.Now()}
	case known:
		delete(l.deleting, ip) // a new pod on an old pod's IP
	}
}

// wasted counts a kept-alive dial to addr (IP:PORT) when its pod was seen
// deleting.
func (l *load) wasted(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if since, ok := l.deletingFor(addr); ok {
		l.keepWasted++
		l.wastedLast = max(l.wastedLast, since)
	}
}

// deletingFor is how long ago the pod at addr (IP:PORT) was seen deleting;
// false when it was not. l.mu is held.
func (l *load) deletingFor(addr string) (time.Duration, bool) {
	ip, _, _ := net.SplitHostPort(addr)
	d, ok := l.deleting[ip]
	return time.Since(d.seen), ok
}

// wastedDials are keepWasted and wastedLast.
func (l *load) wastedDials() (int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keepWasted, l.wastedLast
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
	prevNone := false
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		eps := l.ready()
		if len(eps) == 0 {
			l.none(prevNone)
			l.fail("no ready endpoint", "")
		}
		if prevNone = len(eps) == 0; prevNone {
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
		l.fail(failureKind(err), fmt.Sprintf("%s: %v%s", url, err, l.podState(url)))
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		l.fail(failureKind(err), fmt.Sprintf("%s: body: %v%s", url, err, l.podState(url)))
	case resp.StatusCode >= 500:
		l.fail("5xx", fmt.Sprintf("%s: %s %q%s", url, resp.Status, body, l.podState(url)))
	case resp.StatusCode != http.StatusOK:
		l.fail(resp.Status, url+l.podState(url))
	default:
		l.mu.Lock()
		l.sent++
		l.ok++
		l.mu.Unlock()
	}
}

// podState says of a failed request's target whether the suite had seen
// its pod deleting, and for how long: a failure on a pod that the client
// should have left already is the client's lag, one on a pod not deleting
// is the pod's own.
func (l *load) podState(target string) string {
	host, _, _ := strings.Cut(strings.TrimPrefix(target, "http://"), "/")
	l.mu.Lock()
	defer l.mu.Unlock()
	if since, ok := l.deletingFor(host); ok {
		return fmt.Sprintf(" (its pod seen deleting %s before)", since.Round(time.Millisecond))
	}
	return " (its pod not seen deleting)"
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
