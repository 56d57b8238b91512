package main

import (
	"bytes"
	"sort"
	"strings"
	"sync"
	"time"
)

// marker starts each framing line of a test binary run with
// -test.v=test2json (go test -json): cmd/test2json reads a line as an
// event only with it once it has seen one.
const marker = 0x16

// tracker follows which tests of a binary are running from the framing
// lines of its verbose output (=== RUN, === PAUSE, === CONT and the
// --- PASS, FAIL or SKIP reports), which -v and go test -json make it
// print. The bytes themselves pass through untouched.
type tracker struct {
	mu      sync.Mutex
	line    []byte // the line read so far
	long    bool   // the line outgrew line: no framing line
	marked  bool   // a framing line had the marker: the others need it
	running map[string]*runningTest
	now     func() time.Time
}

type runningTest struct {
	start  time.Time // its last RUN or CONT
	paused bool      // a parallel test waiting for its turn
}

// A test as the overrun names it.
type testRun struct {
	name    string
	elapsed time.Duration
}

func newTracker() *tracker {
	return &tracker{running: map[string]*runningTest{}, now: time.Now}
}

const maxLine = 64 << 10 // a framing line is short; a test's output line may not be

func (t *tracker) write(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if !t.long {
			t.line = append(t.line, chunk...)
			if len(t.line) > maxLine {
				// Keep a framing line that started within it, if any.
				if j := bytes.LastIndexByte(t.line, marker); j >= 0 && len(t.line)-j <= maxLine {
					t.line = append(t.line[:0], t.line[j:]...)
				} else {
					t.line, t.long = t.line[:0], true
				}
			}
		}
		if i < 0 {
			return
		}
		if !t.long {
			t.handle(t.line)
		}
		t.line, t.long = t.line[:0], false
		b = b[i+1:]
	}
}

// handle reads one whole line. As cmd/test2json does, it takes a marker
// anywhere in a line to start a framing line (a test's output without a
// newline may precede it), and a line without one as a framing line too
// (plain -v output) until it has seen a marker.
func (t *tracker) handle(line []byte) {
	if bytes.IndexByte(line, marker) < 0 && t.marked {
		return
	}
	for i, part := range bytes.Split(line, []byte{marker}) {
		if i == 0 && bytes.IndexByte(line, marker) >= 0 {
			continue // a test's output before a marker, if any
		}
		if i > 0 {
			t.marked = true
		}
		t.frame(strings.TrimRight(string(part), "\r"))
	}
}

func (t *tracker) frame(l string) {
	for strings.HasPrefix(l, "    ") { // a subtest's report under plain -v
		l = l[4:]
	}
	switch {
	case strings.HasPrefix(l, "=== RUN   "):
		t.running[strings.TrimSpace(l[10:])] = &runningTest{start: t.now()}
	case strings.HasPrefix(l, "=== PAUSE "):
		if r := t.running[strings.TrimSpace(l[10:])]; r != nil {
			r.paused = true
		}
	case strings.HasPrefix(l, "=== CONT  "):
		if r := t.running[strings.TrimSpace(l[10:])]; r != nil {
			r.paused, r.start = false, t.now()
		}
	case strings.HasPrefix(l, "--- PASS: "), strings.HasPrefix(l, "--- FAIL: "), strings.HasPrefix(l, "--- SKIP: "):
		name := l[10:]
		if i := strings.LastIndex(name, " ("); i >= 0 {
			name = name[:i]
		}
		delete(t.running, strings.TrimSpace(name))
	}
}

// busy are the tests running, not paused, that run no subtest of their
// own (the ones doing the work), and their parents, which wait for them;
// each sorted by name.
func (t *tracker) busy() (leaves, parents []testRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	isParent := map[string]bool{}
	for name, r := range t.running {
		if r.paused {
			continue
		}
		for p := name; ; {
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				break
			}
			p = p[:i]
			isParent[p] = true
		}
	}
	for name, r := range t.running {
		if r.paused {
			continue
		}
		run := testRun{name: name, elapsed: now.Sub(r.start)}
		if isParent[name] {
			parents = append(parents, run)
		} else {
			leaves = append(leaves, run)
		}
	}
	sort.Slice(leaves, func(i, j int) bool { return leaves[i].name < leaves[j].name })
	// The deepest parent first: each report ends its test before its parent's.
	sort.Slice(parents, func(i, j int) bool {
		di, dj := strings.Count(parents[i].name, "/"), strings.Count(parents[j].name, "/")
		if di != dj {
			return di > dj
		}
		return parents[i].name < parents[j].name
	})
	return leaves, parents
}
