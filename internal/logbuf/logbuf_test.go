package logbuf

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate is a destination that takes nothing until opened, like a pipe that
// nobody reads.
type gate struct {
	open chan struct{}
	mu   sync.Mutex
	got  bytes.Buffer
}

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got.Write(p)
}

func (g *gate) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got.String()
}

func TestWriteNeverBlocksOnAStalledDestination(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	w := New(g, 1024)
	began := time.Now()
	for i := range 10000 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("10000 writes to a stalled destination took %v", took)
	}
	close(g.open)
	w.Close(5 * time.Second)
	out := g.String()
	if !strings.HasPrefix(out, "line 0\n") {
		t.Errorf("the first line was not kept first: %.40q", out)
	}
	if !strings.Contains(out, "log lines dropped") {
		t.Errorf("the dropped lines were not reported:\n%s", out)
	}
}

func TestLinesKeepTheirOrder(t *testing.T) {
	var b bytes.Buffer
	w := New(&b, 1<<20)
	for i := range 100 {
		fmt.Fprintf(w, "%d\n", i)
	}
	w.Close(5 * time.Second)
	var want strings.Builder
	for i := range 100 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if b.String() != want.String() {
		t.Fatalf("got %q", b.String())
	}
	fmt.Fprintln(w, "after close")
	if strings.Contains(b.String(), "after close") {
		t.Error("a write after Close reached the destination")
	}
}

func TestCloseIsBoundedOnAStalledDestination(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	defer close(g.open)
	w := New(g, 1024)
	fmt.Fprintln(w, "stuck")
	began := time.Now()
	w.Close(100 * time.Millisecond)
	if took := time.Since(began); took > time.Second {
		t.Fatalf("Close took %v on a stalled destination", took)
	}
}
