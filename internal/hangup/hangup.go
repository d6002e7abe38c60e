// Package hangup tells when the client at the other end of a connection has
// gone, for many connections at once, without a goroutine or a buffer per
// connection. The hub uses it for new-session requests that wait in the queue:
// tens of thousands of them may wait, each must give up its place the moment
// its client leaves, and none has anything to read until it is answered.
package hangup

import (
	"net"
	"sync"
)

// A Watcher watches connections for their peer hanging up. The zero value is
// ready to use. It holds no goroutine and no descriptor while it watches
// nothing (so it may live in a testing/synctest bubble, and needs no Close).
// A connection has one watch of a Watcher at a time: it is watched again only
// after the earlier watch's stop or callback (the kernel keeps one
// registration per connection, which the later watch re-arms).
type Watcher struct {
	mu   sync.Mutex
	inst *instance // nil while nothing is watched
	next int32
}

// Watch calls gone, once, on a goroutine of the watcher's, when c's peer
// closes or resets the connection (or shuts its sending side). Bytes the peer
// sends meanwhile are left unread. stop ends the watch and must be called
// before c is closed. gone may still run after stop returns when the hang-up
// was seen just before: make it harmless then. A connection without a
// descriptor, or one the kernel will not register, is watched by a goroutine
// reading it instead.
func (w *Watcher) Watch(c net.Conn, gone func()) (stop func()) {
	if stop, ok := w.watch(c, gone, false); ok {
		return stop
	}
	return watchByReading(c, gone)
}

// WatchReadable calls ready, once, on a goroutine of the watcher's, when c has
// bytes to read or its peer has gone: the moment a new connection is worth a
// reader. stop ends the watch and must be called before c is closed unless
// ready has run. A connection the watcher cannot register is ready at once
// (ready runs before WatchReadable returns).
func (w *Watcher) WatchReadable(c net.Conn, ready func()) (stop func()) {
	if stop, ok := w.watch(c, ready, true); ok {
		return stop
	}
	ready()
	return func() {}
}

// watchByReading watches with a goroutine that reads c: the portable way, and
// the fallback for a connection without a descriptor.
func watchByReading(c net.Conn, gone func()) func() {
	var (
		mu      sync.Mutex
		stopped bool
	)
	go func() {
		var b [1]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				mu.Lock()
				s := stopped
				mu.Unlock()
				if !s {
					gone()
				}
				return
			}
		}
	}()
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}
