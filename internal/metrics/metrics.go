// Package metrics holds the supervisor's counters and gauges and writes them in
// the Prometheus text format.
//
// It is deliberately small: a supervisor exports a few dozen series, and the
// official client library would add megabytes of resident code to a process
// whose whole budget is single-digit megabytes. Values are float64 bits in
// atomics, so updates never take a lock; only registration and labelled
// lookups do.
package metrics

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry is a set of metrics, written in registration order.
type Registry struct {
	mu      sync.Mutex
	metrics []*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

type family struct {
	name, help, kind string
	labels           []string
	fn               func() float64 // for a gauge computed at scrape time

	mu     sync.Mutex
	series map[string]*Value // key: label values joined by 0xff
}

// Value is one series. Counters only go up; gauges are set.
type Value struct {
	labels []string
	bits   atomic.Uint64
}

// Add adds d to the value.
func (v *Value) Add(d float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Inc adds one.
func (v *Value) Inc() { v.Add(1) }

// Set replaces the value.
func (v *Value) Set(f float64) { v.bits.Store(math.Float64bits(f)) }

// Get returns the value.
func (v *Value) Get() float64 { return math.Float64frombits(v.bits.Load()) }

// Vec is a family of series told apart by label values.
type Vec struct{ f *family }

// With returns the series for the given label values, in the order the labels
// were declared, creating it at zero.
func (v Vec) With(values ...string) *Value {
	if len(values) != len(v.f.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", v.f.name, len(v.f.labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	v.f.mu.Lock()
	defer v.f.mu.Unlock()
	s, ok := v.f.series[key]
	if !ok {
		s = &Value{labels: values}
		v.f.series[key] = s
	}
	return s
}

func (r *Registry) add(name, help, kind string, labels []string, fn func() float64) *family {
	f := &family{name: name, help: help, kind: kind, labels: labels, fn: fn, series: map[string]*Value{}}
	r.mu.Lock()
	r.metrics = append(r.metrics, f)
	r.mu.Unlock()
	return f
}

// Counter registers a counter without labels.
func (r *Registry) Counter(name, help string) *Value {
	return Vec{r.add(name, help, "counter", nil, nil)}.With()
}

// Gauge registers a gauge without labels.
func (r *Registry) Gauge(name, help string) *Value {
	return Vec{r.add(name, help, "gauge", nil, nil)}.With()
}

// CounterVec registers a counter with labels.
func (r *Registry) CounterVec(name, help string, labels ...string) Vec {
	return Vec{r.add(name, help, "counter", labels, nil)}
}

// GaugeVec registers a gauge with labels.
func (r *Registry) GaugeVec(name, help string, labels ...string) Vec {
	return Vec{r.add(name, help, "gauge", labels, nil)}
}

// GaugeFunc registers a gauge whose value is read at scrape time.
func (r *Registry) GaugeFunc(name, help string, fn func() float64) {
	r.add(name, help, "gauge", nil, fn)
}

// CounterFunc registers a counter whose value is read at scrape time.
func (r *Registry) CounterFunc(name, help string, fn func() float64) {
	r.add(name, help, "counter", nil, fn)
}

// WriteTo writes every metric in the Prometheus text exposition format 0.0.4.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	fams := append([]*family(nil), r.metrics...)
	r.mu.Unlock()
	var b strings.Builder
	for _, f := range fams {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, escape(f.help, false), f.name, f.kind)
		if f.fn != nil {
			fmt.Fprintf(&b, "%s %s\n", f.name, format(f.fn()))
			continue
		}
		f.mu.Lock()
		keys := make([]string, 0, len(f.series))
		for k := range f.series {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s := f.series[k]
			b.WriteString(f.name)
			if len(f.labels) > 0 {
				b.WriteByte('{')
				for i, l := range f.labels {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "%s=\"%s\"", l, escape(s.labels[i], true))
				}
				b.WriteByte('}')
			}
			fmt.Fprintf(&b, " %s\n", format(s.Get()))
		}
		f.mu.Unlock()
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

func format(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// escape is s with the exposition format's escapes: a backslash and a
// newline, and in a label value (quoted) a double quote. Written out: a
// strings.Replacer links 7 kB of the binary for these three bytes.
func escape(s string, quoted bool) string {
	if !strings.ContainsAny(s, "\\\n\"") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '"' && quoted:
			b.WriteString(`\"`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
