package launcher

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// What a Broadcast keeps of the output for followers that come late: the
// first headKept bytes (the driver's start-up lines) and the last tailKept.
const (
	headKept = 16 << 10
	tailKept = 48 << 10
)

// Broadcast is a LogSource fed by writes: a follower gets the output from the
// start, as Selenoid serves a container's — what is kept of it (the first 16
// KiB and the last 48 KiB, a line saying how much between was not kept) —
// then what is written while it follows. A follower that falls more than 256
// writes behind loses its place rather than slowing the driver's output.
type Broadcast struct {
	mu        sync.Mutex
	followers map[chan []byte]struct{}
	closed    bool
	done      chan struct{}
	head      []byte
	tail      []byte
	dropped   int64 // bytes between head and tail not kept
}

// NewBroadcast returns an empty broadcast.
func NewBroadcast() *Broadcast {
	return &Broadcast{followers: map[chan []byte]struct{}{}, done: make(chan struct{})}
}

// Write keeps p for later followers and passes it to every follower; it never
// blocks on one.
func (b *Broadcast) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keep(p)
	for ch := range b.followers {
		select {
		case ch <- append([]byte(nil), p...):
		default:
			delete(b.followers, ch)
			close(ch)
		}
	}
	return len(p), nil
}

// keep adds p to what later followers get first, within the bounds.
func (b *Broadcast) keep(p []byte) {
	if n := min(len(p), headKept-len(b.head)); n > 0 {
		b.head = append(b.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - tailKept; over > 0 {
		b.dropped += int64(over)
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
}

// Close ends every follow: the output is over.
func (b *Broadcast) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	close(b.done)
	for ch := range b.followers {
		delete(b.followers, ch)
		close(ch)
	}
}

// Follow writes what is kept of the output so far, then what is written from
// now on, to w until ctx ends, the output ends, or w fails.
func (b *Broadcast) Follow(ctx context.Context, w io.Writer) error {
	ch := make(chan []byte, 256)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.followers[ch] = struct{}{}
	kept := append([]byte(nil), b.head...)
	if b.dropped > 0 {
		kept = fmt.Appendf(kept, "\n[… %d bytes of output not kept …]\n", b.dropped)
	}
	kept = append(kept, b.tail...)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		if _, ok := b.followers[ch]; ok {
			delete(b.followers, ch)
			close(ch)
		}
		b.mu.Unlock()
	}()
	if len(kept) > 0 {
		if _, err := w.Write(kept); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p, ok := <-ch:
			if !ok {
				return nil
			}
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
	}
}
