package launcher

import (
	"context"
	"io"
	"sync"
)

// Broadcast is a LogSource fed by writes: every follower gets what is written
// after it began following. A follower that falls more than 256 writes behind
// loses its place rather than slowing the driver's output.
type Broadcast struct {
	mu        sync.Mutex
	followers map[chan []byte]struct{}
	closed    bool
	done      chan struct{}
}

// NewBroadcast returns an empty broadcast.
func NewBroadcast() *Broadcast {
	return &Broadcast{followers: map[chan []byte]struct{}{}, done: make(chan struct{})}
}

// Write passes p to every follower; it never blocks on one.
func (b *Broadcast) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
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

// Follow writes what is written from now on to w until ctx ends, the output
// ends, or w fails.
func (b *Broadcast) Follow(ctx context.Context, w io.Writer) error {
	ch := make(chan []byte, 256)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.followers[ch] = struct{}{}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		if _, ok := b.followers[ch]; ok {
			delete(b.followers, ch)
			close(ch)
		}
		b.mu.Unlock()
	}()
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
