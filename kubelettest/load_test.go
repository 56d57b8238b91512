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
	"path/filepath"
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

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
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
	examples []failure // the first ten that say what they got
	targeted []failure // every one sent to an endpoint, without what
	// noneReady are the moments the slices listed no ready endpoint, each
	// with the endpoints they listed and the node's load then: what
	// explains it (a probe's failure, and why).
	noneReady []*unreadyMoment
	// keepSent are the requests sent on kept-alive connections, keepDials
	// the connections they made: a close hint that sends a client back to
	// a pod still in its endpoints costs a new connection per request.
	keepSent, keepDials atomic.Int64
	// snapshots counts the failures whose target's state was taken.
	snapshots atomic.Int64
	// keepWasted are those of keepDials made to a pod whose deletion had
	// begun (deleting, kept by watchDeletions): that pod was still among
	// the client's ready endpoints, so the connection was made because a
	// close hint ended the last one (or the kept ones were all busy), the
	// waste --drain-delay exists to remove. wastedLast is the longest one
	// came after its pod's deletion: how long the client kept a deleting
	// pod among its ready endpoints.
	keepWasted int
	wastedLast time.Duration
	pods       map[string][]*podLife // by pod IP, oldest first
	// listings are, by endpoint (IP:PORT), the spans in which the
	// client's slices listed it ready.
	listings map[string][]span
}

// span is a stretch of time; to is zero while it lasts.
type span struct{ from, to time.Time }

// podLife is what the suite saw of a pod at its IP.
type podLife struct {
	name    string
	uid     types.UID
	created time.Time
	// asked is when the pod's deletion was asked for: its
	// deletionTimestamp less its grace period, in whole seconds, known
	// however late the watch delivered it.
	asked time.Time
	// seen is the watch's first sight of the pod deleting.
	seen time.Time
	// ready is when the pod last became Ready (whole seconds); restarts
	// are its containers' restarts.
	ready    time.Time
	restarts int32
}

// failure is a failed request: when it was sent and when it failed, its
// target, and what it got.
type failure struct {
	sent, at time.Time
	target   string // IP:PORT
	// what is what it got; for the first 5xx, also the pods at the
	// target's IP as it failed (stateAt).
	what string
}

// unreadyMoment is a stretch of ticks that found no ready endpoint.
type unreadyMoment struct {
	at, last  time.Duration // since the load's start
	endpoints string
	load      string
}

func newLoad(c *cluster, service string, port int32, rate time.Duration, path func(int) string) *load {
	l := &load{c: c, service: service, port: port, rate: rate, path: path, slices: map[string]*discoveryv1.EndpointSlice{}, failures: map[string]int{},
		pods: map[string][]*podLife{}, listings: map[string][]span{}}
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
	return l.readyLocked()
}

func (l *load) readyLocked() []string {
	var all []string
	for _, s := range l.slices {
		all = append(all, readyEndpoints(s, l.port)...)
	}
	sort.Strings(all)
	return all
}

// noteListing keeps when the client's slices came to list an endpoint
// ready, and when they stopped. l.mu is held.
func (l *load) noteListing(before, after []string) {
	now := time.Now()
	for _, ep := range after {
		if !slices.Contains(before, ep) {
			l.listings[ep] = append(l.listings[ep], span{from: now})
		}
	}
	for _, ep := range before {
		if s := l.listings[ep]; !slices.Contains(after, ep) && len(s) > 0 {
			s[len(s)-1].to = now
		}
	}
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
				before := l.readyLocked()
				c.change()
				l.noteListing(before, l.readyLocked())
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
	lives := l.pods[ip]
	var life *podLife
	if n := len(lives); n > 0 && lives[n-1].uid == p.UID {
		life = lives[n-1]
	} else {
		// A new pod, or one on an old pod's IP.
		life = &podLife{name: p.Name, uid: p.UID, created: p.CreationTimestamp.Time}
		l.pods[ip] = append(lives, life)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			life.ready = c.LastTransitionTime.Time
		}
	}
	var restarts int32
	for _, c := range p.Status.ContainerStatuses {
		restarts += c.RestartCount
	}
	life.restarts = max(life.restarts, restarts)
	if p.DeletionTimestamp != nil && life.seen.IsZero() {
		life.seen = time.Now()
		life.asked = p.DeletionTimestamp.Time
		if g := p.DeletionGracePeriodSeconds; g != nil {
			life.asked = life.asked.Add(-time.Duration(*g) * time.Second)
		}
	}
}

// podAt is the pod that had ip at t: the newest one created by then.
// l.mu is held.
func (l *load) podAt(ip string, t time.Time) *podLife {
	lives := l.pods[ip]
	for i := len(lives) - 1; i >= 0; i-- {
		// Creation times are cut to the second, so the pod made by t has
		// one at or before it; the first pod answers for earlier times.
		if !lives[i].created.After(t) || i == 0 {
			return lives[i]
		}
	}
	return nil
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
	lives := l.pods[ip]
	if n := len(lives); n > 0 && !lives[n-1].seen.IsZero() {
		return time.Since(lives[n-1].seen), true
	}
	return 0, false
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
			l.fail("no ready endpoint", time.Now(), "", "")
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
	sent := time.Now()
	target, _, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	resp, err := client.Get(url)
	if err != nil {
		l.fail(failureKind(err), sent, target, fmt.Sprintf("%s: %v", url, err))
		return
	}
	// An app's answer is a line; a fault's may be any size, or endless.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case err != nil:
		l.fail(failureKind(err), sent, target, fmt.Sprintf("%s: body: %v", url, err))
	case resp.StatusCode >= 500:
		what := fmt.Sprintf("%s: %s %q", url, resp.Status, body)
		if l.snapshots.Add(1) <= 3 {
			what += "\n" + l.stateAt(target)
		}
		l.fail("5xx", sent, target, what)
	case resp.StatusCode != http.StatusOK:
		l.fail(resp.Status, sent, target, url)
	default:
		l.mu.Lock()
		l.sent++
		l.ok++
		l.mu.Unlock()
	}
}

// stateAt describes every pod at the target's IP now, of any test, and
// its containers' last log lines (the node's CRI logs, with their times).
func (l *load) stateAt(target string) string {
	ip, _, _ := net.SplitHostPort(target)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := l.c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "    the pods: " + err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		if p.Status.PodIP != ip {
			continue
		}
		fmt.Fprintf(&b, "    pod %s/%s created %s deleting %v phase %s\n", p.Namespace, p.Name,
			p.CreationTimestamp.Format(time.TimeOnly), p.DeletionTimestamp != nil, p.Status.Phase)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "      %s=%s since %s\n", c.Type, c.Status, c.LastTransitionTime.Format(time.TimeOnly))
		}
		for _, c := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			fmt.Fprintf(&b, "      %s ready=%v restarts=%d state=%+v\n", c.Name, c.Ready, c.RestartCount, c.State)
		}
		root := fmt.Sprintf("/proc/%d/root/var/log/pods", theNode.holder.Process.Pid)
		files, _ := filepath.Glob(filepath.Join(root, p.Namespace+"_"+p.Name+"_*", "*", "*.log"))
		for _, f := range files {
			// The last lines are wanted, of a log as long as the
			// container ran.
			data, _ := proctest.ReadFile(f)
			lines := strings.Split(strings.TrimSpace(data), "\n")
			fmt.Fprintf(&b, "      log %s:\n", strings.TrimPrefix(f, root))
			for _, line := range lines[max(0, len(lines)-8):] {
				fmt.Fprintf(&b, "        %s\n", line)
			}
		}
	}
	if b.Len() == 0 {
		return "    no pod at " + ip
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// failureLines describe the failed requests kept, each with what the suite saw
// of its target: the pod at its IP, when that pod's deletion was asked for
// (by its deletionTimestamp, which no watch's lag delays) and seen, and
// when the client's slices listed the endpoint ready. A failure on a pod
// not deleting, or deleting for less than its app keeps serving, is the
// pod's own; one on a pod deleted longer ago is the client's lag.
func (l *load) failureLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	rel := func(t time.Time) string { return t.Sub(l.start).Round(time.Millisecond).String() }
	var out []string
	for _, f := range l.examples {
		line := fmt.Sprintf("at %s (sent at %s): %s", rel(f.at), rel(f.sent), f.what)
		if f.target == "" {
			out = append(out, line)
			continue
		}
		ip, _, _ := net.SplitHostPort(f.target)
		if p := l.podAt(ip, f.sent); p != nil {
			line += fmt.Sprintf("; pod %s, created at %s, Ready since %s, %d restarts", p.name, rel(p.created), rel(p.ready), p.restarts)
			if p.seen.IsZero() {
				line += ", not seen deleting"
			} else {
				line += fmt.Sprintf(", its deletion asked at %s (whole seconds), seen at %s", rel(p.asked), rel(p.seen))
			}
		} else {
			line += "; no pod seen at its IP"
		}
		var spans []string
		for _, s := range l.listings[f.target] {
			to := "on"
			if !s.to.IsZero() {
				to = rel(s.to)
			}
			spans = append(spans, rel(s.from)+" to "+to)
		}
		line += "; listed ready " + or(strings.Join(spans, ", "))
		out = append(out, line)
	}
	return out
}

// failedPods are the pods the kept failures went to, as far as the
// suite saw them.
func (l *load) failedPods() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for _, f := range l.examples {
		ip, _, _ := net.SplitHostPort(f.target)
		if p := l.podAt(ip, f.sent); p != nil && !slices.Contains(names, p.name) {
			names = append(names, p.name)
		}
	}
	return names
}

// dropLag is how long the client listed a deleted pod ready after its
// deletion was asked for: the median and the longest, over the pods
// deleted while it watched. A longer lag than the app's preStop sends
// requests to an app that has closed its port.
func (l *load) dropLag() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lags []time.Duration
	for ip, lives := range l.pods {
		ep := net.JoinHostPort(ip, fmt.Sprint(l.port))
		for _, p := range lives {
			if p.asked.IsZero() {
				continue
			}
			for _, s := range l.listings[ep] {
				// The span the deletion came in (whole seconds: a span
				// that ended in the second before counts too).
				if !s.to.IsZero() && s.to.After(p.asked.Add(-time.Second)) && s.from.Before(p.asked.Add(time.Second)) {
					lags = append(lags, s.to.Sub(p.asked))
					break
				}
			}
		}
	}
	if len(lags) == 0 {
		return "no deleted pod's endpoint seen leaving"
	}
	slices.Sort(lags)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	return fmt.Sprintf("a deleted pod's endpoint left the client's ready list %s after its deletion was asked for (median; longest %s, %d pods; whole seconds)",
		r(lags[len(lags)/2]), r(lags[len(lags)-1]), len(lags))
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

// fail counts a failed request of a kind; what it got is kept for the
// first ten that say.
func (l *load) fail(kind string, sent time.Time, target, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	l.failures[kind]++
	f := failure{sent: sent, at: time.Now(), target: target}
	if target != "" {
		l.targeted = append(l.targeted, f)
	}
	if what != "" && len(l.examples) < 10 {
		f.what = what
		l.examples = append(l.examples, f)
	}
}

// pastPreStop counts the failures sent to a pod whose deletion had been asked
// for more than preStop before (and one second: a deletionTimestamp has
// whole seconds), which the client still listed ready: the app's preStop
// had ended, so it had stopped serving, by design and with any proxy. Such
// a failure is the client's lag behind the EndpointSlices, which a
// kube-proxy or a mesh has too, not the pod's; they are what is left when
// that lag outlasts the app's preStop on a starved node.
func (l *load) pastPreStop(preStop time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, f := range l.targeted {
		ip, _, _ := net.SplitHostPort(f.target)
		if p := l.podAt(ip, f.sent); p != nil && !p.asked.IsZero() && f.sent.Sub(p.asked) >= preStop+time.Second {
			n++
		}
	}
	return n
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
