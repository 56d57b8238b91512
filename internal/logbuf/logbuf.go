// Package logbuf is the supervisor's log writer: one that never blocks the
// code that logs.
//
// A container's stderr is a pipe that the runtime drains. When nobody drains
// it (a stalled shim, a log pipeline under pressure), a plain write blocks,
// and every goroutine that logs stops with it: the signal handler, the
// drain, the stop sequence. A supervisor that cannot act on SIGTERM because
// its log is full is worse than one that loses log lines, so lines go
// through a bounded buffer instead, written out by a goroutine of its own;
// lines that do not fit are dropped and counted, and the count is written
// once the destination takes lines again.
package logbuf

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Writer is an io.Writer whose Write never blocks. Each Write is kept whole,
// as slog's handlers write one record a call.
type Writer struct {
	out  io.Writer
	max  int
	wake chan struct{} // a line is waiting
	done chan struct{} // the writing goroutine has ended

	mu     sync.Mutex
	queue  []entry
	size   int // bytes of the lines in queue
	closed bool
}

// entry is a line, or a count of lines dropped at that place in the log.
type entry struct {
	line    []byte
	dropped int
}

// New returns a Writer to out that holds at most max bytes of lines not yet
// written. It starts the goroutine that writes them; Close ends it.
func New(out io.Writer, max int) *Writer {
	w := &Writer{out: out, max: max, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// Write queues a copy of p. It never blocks and never fails: a line that
// does not fit is dropped and counted.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return len(p), nil
	case w.size+len(p) > w.max:
		if n := len(w.queue); n > 0 && w.queue[n-1].line == nil {
			w.queue[n-1].dropped++
		} else {
			w.queue = append(w.queue, entry{dropped: 1})
		}
	default:
		w.queue = append(w.queue, entry{line: append([]byte(nil), p...)})
		w.size += len(p)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *Writer) run() {
	defer close(w.done)
	for range w.wake {
		for {
			w.mu.Lock()
			if len(w.queue) == 0 {
				closed := w.closed
				w.mu.Unlock()
				if closed {
					return
				}
				break
			}
			e := w.queue[0]
			w.queue[0] = entry{}
			w.queue = w.queue[1:]
			w.mu.Unlock()

			if e.line == nil {
				fmt.Fprintf(w.out, "proxy-supervisor: %d log lines dropped here: the log's reader did not keep up\n", e.dropped)
				continue
			}
			w.out.Write(e.line)
			w.mu.Lock()
			w.size -= len(e.line)
			w.mu.Unlock()
		}
	}
}

// Close writes what is queued, waiting at most d for a destination that
// does not take it, and stops the writing goroutine once it has. Writes
// after Close are dropped.
func (w *Writer) Close(d time.Duration) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	// Wake the writer even with nothing queued, so that it sees closed.
	select {
	case w.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C: // the destination is stalled; what is left is lost with the process
	}
}
