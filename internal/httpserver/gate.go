package httpserver

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/websummoner/websummoner/internal/hangup"
)

// gate hands Go's HTTP server a connection only once its client has sent
// something (or gone). Until then a connection costs its descriptor, a timer
// and a registration in an epoll set: no goroutine, no read and write buffers
// and no request state, which the HTTP server allocates the moment it accepts.
// Thousands of clients that connect at once and write later (a CI fleet
// starting together, a load tool starved of CPU) otherwise hold thousands of
// those at once, many times what the same requests hold once queued (the
// waiters scenario of docs/benchmarks.md). TCP_DEFER_ACCEPT does the same in the kernel, but not once a
// burst overflows the SYN queue and syncookies take over.
//
// Of the connections that have something to read, at most arrivalSlots are in
// their first request at once (each with its goroutine, buffers and parse);
// the rest wait here, readable, for a slot. A slot comes back when the first
// request is done (the connection idle, hijacked by a queued request, or
// closed), or after arrivalGrace however it goes, so a slow first request (a
// browser starting, a client trickling its body) delays the next arrival by
// that at most.
type gate struct {
	ln      net.Listener
	timeout time.Duration // nothing sent for this long: closed, as the HTTP server's header timeout would
	held    func(n int)   // told how many connections the gate holds after each accept
	watch   hangup.Watcher

	ready  chan net.Conn
	done   chan struct{} // closed by Close
	failed chan struct{} // closed when the listener fails for good; err says how
	err    error
	once   sync.Once

	slots chan struct{} // one per connection in its first request
	grace time.Duration // arrivalGrace; tests set it
	on    bool          // false: accepted connections pass at once (-first-byte-gate=false)

	mu       sync.Mutex
	closed   bool
	pending  map[net.Conn]*heldConn
	arriving map[net.Conn]*time.Timer // handed over, in their first request
}

// How many connections may be in their first request at once, and for how
// long one holds its slot at most.
const (
	arrivalSlots = 64
	arrivalGrace = 100 * time.Millisecond
)

// heldConn is a connection the gate holds.
type heldConn struct {
	since   time.Time
	timer   *time.Timer
	stop    func() // ends the watch; nil until WatchReadable has returned
	dropped bool   // dropped before stop was known: its holder closes it
}

func newGate(ln net.Listener, timeout time.Duration, held func(int), on bool) *gate {
	g := &gate{ln: ln, timeout: timeout, held: held, on: on, ready: make(chan net.Conn),
		done: make(chan struct{}), failed: make(chan struct{}), pending: map[net.Conn]*heldConn{},
		slots: make(chan struct{}, arrivalSlots), grace: arrivalGrace, arriving: map[net.Conn]*time.Timer{}}
	go g.acceptLoop()
	return g
}

// Accept returns the next connection that has something to read.
func (g *gate) Accept() (net.Conn, error) {
	select {
	case c := <-g.ready:
		return c, nil
	case <-g.done:
		return nil, net.ErrClosed
	case <-g.failed:
		return nil, g.err
	}
}

// Close stops accepting and closes every connection still held.
func (g *gate) Close() error {
	var err error
	g.once.Do(func() {
		close(g.done)
		err = g.ln.Close()
		g.mu.Lock()
		g.closed = true
		var all []net.Conn
		for c := range g.pending {
			all = append(all, c)
		}
		g.mu.Unlock()
		for _, c := range all {
			g.drop(c)
		}
	})
	return err
}

// Addr is the listener's.
func (g *gate) Addr() net.Addr { return g.ln.Addr() }

func (g *gate) acceptLoop() {
	var delay time.Duration
	for {
		c, err := g.ln.Accept()
		if err != nil {
			select {
			case <-g.done:
				return
			default:
			}
			// Out of descriptors and the like: as the HTTP server does, wait a
			// little longer each time; the server sheds meanwhile.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				g.held(-1)
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
				case <-g.done:
					return
				}
				continue
			}
			g.err = err
			close(g.failed)
			return
		}
		delay = 0
		if !g.on {
			// Straight to the HTTP server, which bounds a silent connection by
			// its header timeout. A connection handed back after a queued
			// request (Rehold) is still held: the server has no other way to
			// take it back.
			select {
			case g.ready <- c:
			case <-g.done:
				c.Close()
				return
			}
			continue
		}
		g.hold(c, g.timeout)
	}
}

// hold keeps c until it has something to read (then the HTTP server gets it)
// or timeout passes (then it is closed): a new connection, or one handed back
// after a hijacked request (Rehold).
func (g *gate) hold(c net.Conn, timeout time.Duration) {
	h := &heldConn{since: time.Now()}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		c.Close()
		return
	}
	g.pending[c] = h
	n := len(g.pending)
	h.timer = time.AfterFunc(timeout, func() { g.drop(c) })
	g.mu.Unlock()
	g.held(n)
	stop := g.watch.WatchReadable(c, func() { g.pass(c) })
	g.mu.Lock()
	_, still := g.pending[c]
	if still {
		h.stop = stop
	}
	dropped := h.dropped
	g.mu.Unlock()
	if dropped {
		stop()
		c.Close()
	}
}

// pass hands a connection with something to read to the HTTP server.
func (g *gate) pass(c net.Conn) {
	g.mu.Lock()
	_, ok := g.unholdLocked(c)
	g.mu.Unlock()
	if !ok {
		return
	}
	g.give(c)
}

// give hands c, which the watch found readable, to the HTTP server as a new
// arrival.
func (g *gate) give(c net.Conn) {
	select {
	case g.slots <- struct{}{}:
	case <-g.done:
		c.Close()
		return
	}
	g.mu.Lock()
	g.arriving[c] = time.AfterFunc(g.grace, func() { g.arrived(c) })
	g.mu.Unlock()
	select {
	case g.ready <- c:
	case <-g.done:
		g.arrived(c)
		c.Close()
	}
}

// unholdLocked takes c out of the held connections, its timer stopped; g.mu
// is held. Whoever gets ok is the one to pass or close c.
func (g *gate) unholdLocked(c net.Conn) (*heldConn, bool) {
	h, ok := g.pending[c]
	if ok {
		delete(g.pending, c)
		h.timer.Stop()
	}
	return h, ok
}

// arrived gives back the slot of a connection whose first request is done or
// has had its arrivalGrace; later calls for it do nothing.
func (g *gate) arrived(c net.Conn) {
	g.mu.Lock()
	t, ok := g.arriving[c]
	if ok {
		delete(g.arriving, c)
		t.Stop()
	}
	g.mu.Unlock()
	if ok {
		<-g.slots
	}
}

// drop closes a held connection (timed out, shed, or the gate closed).
func (g *gate) drop(c net.Conn) {
	g.mu.Lock()
	h, ok := g.unholdLocked(c)
	var stop func()
	if ok {
		if stop = h.stop; stop == nil {
			h.dropped = true
		}
	}
	g.mu.Unlock()
	if stop != nil {
		stop()
		c.Close()
	}
}

// shed drops the connections held since before t; it returns how many.
func (g *gate) shed(t time.Time) int {
	g.mu.Lock()
	var old []net.Conn
	for c, h := range g.pending {
		if h.since.Before(t) {
			old = append(old, c)
		}
	}
	g.mu.Unlock()
	for _, c := range old {
		g.drop(c)
	}
	return len(old)
}

// count is how many connections the gate holds.
func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}
