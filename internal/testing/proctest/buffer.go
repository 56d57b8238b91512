package proctest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
)

// A Buffer keeps a process's output whole up to keepHead+keepTail bytes;
// past that, its first keepHead and its last keepTail (to 2*keepTail
// between cuts), and how much it cut between them. What a process writes
// depends on how long it runs and on its faults (a retry logged every
// poll, a loop that spins), and a test binary holds the output of every
// process its tests started: unbounded, it ran out of memory.
const (
	keepHead = 1 << 20
	keepTail = 1 << 20
)

// Buffer is the output of a child process that a test reads while the
// process still writes, and that several goroutines may write and read at
// once: its first and its last MiB (keepHead, keepTail), with a marker
// line where it cut the rest. The zero value is empty and ready.
//
// A search of String cannot see what was cut; Proc.WaitLog and the data
// race check watch the output as it is written instead, and so see it all.
type Buffer struct {
	mu   sync.Mutex
	head []byte // the first bytes written, to headCap
	tail []byte // the rest, of which the last tailCap and more are kept
	cut  int64  // bytes dropped between head and tail
	// watches are the strings looked for in each write.
	watches []*watch
	// headCap and tailCap replace keepHead and keepTail when set (the
	// tests of Buffer).
	headCap, tailCap int
}

// watch is a string looked for in everything a Buffer is written.
type watch struct {
	s    []byte
	seen bool
}

func (b *Buffer) caps() (head, tail int) {
	head, tail = keepHead, keepTail
	if b.headCap > 0 {
		head = b.headCap
	}
	if b.tailCap > 0 {
		tail = b.tailCap
	}
	return head, tail
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.watches {
		w.seen = w.seen || b.arrives(w.s, p)
	}
	n := len(p)
	headCap, tailCap := b.caps()
	if room := headCap - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	b.tail = append(b.tail, p...)
	// Cut to the last tailCap only past twice that, so that a cut's copy
	// costs as much as the writes before it.
	if len(b.tail) > 2*tailCap {
		drop := len(b.tail) - tailCap
		b.cut += int64(drop)
		b.tail = append(b.tail[:0], b.tail[drop:]...)
	}
	return n, nil
}

// arrives reports whether s is in p, or across the end of what was
// written before p and p's start. b.mu is held.
func (b *Buffer) arrives(s, p []byte) bool {
	if bytes.Contains(p, s) {
		return true
	}
	k := len(s) - 1
	before := b.last(k)
	if len(before) == 0 || k == 0 {
		return false
	}
	edge := append(before[:len(before):len(before)], p[:min(k, len(p))]...)
	return bytes.Contains(edge, s)
}

// last is up to the last k bytes written. b.mu is held.
func (b *Buffer) last(k int) []byte {
	if len(b.tail) >= k || b.cut > 0 {
		return b.tail[max(0, len(b.tail)-k):]
	}
	// Nothing cut: head and tail are one run.
	h := b.head[max(0, len(b.head)-(k-len(b.tail))):]
	return append(h[:len(h):len(h)], b.tail...)
}

// has reports whether s is in what the buffer keeps. b.mu is held.
func (b *Buffer) has(s []byte) bool {
	if bytes.Contains(b.head, s) || bytes.Contains(b.tail, s) {
		return true
	}
	if b.cut > 0 || len(b.tail) == 0 {
		return false
	}
	k := len(s) - 1
	h := b.head[max(0, len(b.head)-k):]
	return bytes.Contains(append(h[:len(h):len(h)], b.tail[:min(k, len(b.tail))]...), s)
}

// watch starts looking for s in what is written from now on, and returns
// whether s was seen, in what the buffer still keeps or in a write since;
// cut is what the buffer had dropped before, unseen; stop ends the watch.
func (b *Buffer) watch(s string) (seen func() bool, cut int64, stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cut = b.cut
	w := &watch{s: []byte(s)}
	w.seen = b.has(w.s)
	b.watches = append(b.watches, w)
	seen = func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return w.seen
	}
	stop = func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, o := range b.watches {
			if o == w {
				b.watches = append(b.watches[:i], b.watches[i+1:]...)
				break
			}
		}
	}
	return seen, cut, stop
}

// Cut is how many bytes of the output the buffer has dropped.
func (b *Buffer) Cut() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cut
}

// String returns what has been written so far: all of it, or, once the
// buffer has cut, its first and last whole lines around a line that says
// how much is missing.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cut == 0 {
		return string(b.head) + string(b.tail)
	}
	// The lines on each side of the cut are partial: they go with it, so
	// that a search of lines finds only whole ones.
	h, t := b.head, b.tail
	if i := bytes.LastIndexByte(h, '\n'); i >= 0 {
		h = h[:i+1]
	}
	if i := bytes.IndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	cut := b.cut + int64(len(b.head)-len(h)+len(b.tail)-len(t))
	sep := ""
	if len(h) > 0 && h[len(h)-1] != '\n' {
		sep = "\n"
	}
	headCap, tailCap := b.caps()
	return fmt.Sprintf("%s%s[proctest: %d bytes of output cut here; it keeps the first %d and the last %d]\n%s",
		h, sep, cut, headCap, tailCap, t)
}

// ReadFile is the file at path as a Buffer would keep it, reading no more
// than that of it: a log that a process wrote for as long as it ran.
func ReadFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}
	var b Buffer
	headCap, tailCap := b.caps()
	size := st.Size()
	read := func(off, n int64) ([]byte, error) {
		p := make([]byte, n)
		k, err := f.ReadAt(p, off)
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("read %s at %d: %w", path, off, err)
		}
		return p[:k], nil
	}
	if b.head, err = read(0, min(size, int64(headCap))); err != nil {
		return "", err
	}
	if size > int64(headCap) {
		from := max(int64(headCap), size-int64(tailCap))
		if b.tail, err = read(from, size-from); err != nil {
			return "", err
		}
		b.cut = from - int64(headCap)
	}
	return b.String(), nil
}
