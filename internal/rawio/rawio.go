// Package rawio reads and writes TCP connections with raw read(2) and
// write(2) calls, ones that keep the calling goroutine's P (the Go
// scheduler's processor) through the call.
//
// Why: Go's own Read and Write go through the scheduler's system-call path,
// which costs the hub, running on one P, scheduler work on every command.
// Entering a system call wakes the scheduler's monitor thread (sysmon) with a
// futex whenever it had gone to sleep because the P was idle — at low load,
// around every command. And sysmon takes the P from a thread it sees in one
// system call for a whole tick (20 µs and up) and hands it to another thread
// (with one P, whether or not there is other work); a write to a loopback
// socket runs the receiving side of TCP too and often outlasts that tick, so
// a thread was woken for nothing and the writer had to get its P back. The
// sockets are non-blocking, so a raw call never waits: it copies what is
// there or what fits and returns, and when there is nothing to read or no
// room to write the goroutine waits in Go's poller as usual (deadlines and
// Close work as before).
//
// Measured on the proxy scenario at 32 sessions, with the driver side's
// writes alone done this way: the hub's CPU per command 60–65 µs → 51–55 µs,
// futex calls per 1,000 commands 221 → 17–22; with the clients' side too,
// 9–11 (docs/benchmarks.md).
package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// rawMax bounds what one raw call copies (tens of µs): a larger one — a
// screenshot, a file, a burst of VNC frames — could keep the P long enough for
// the hub's other goroutines to notice, so it takes Go's ordinary system-call
// path, on which sysmon may lend the P to them meanwhile.
const rawMax = 64 << 10

// Conn is a TCP connection whose Read and Write are raw calls; everything else
// is the *net.TCPConn's, so it still offers SyscallConn, CloseWrite, ReadFrom,
// deadlines and the rest. Reads may come from one goroutine and writes from
// others at the same time (a hijacked WebSocket is read by one and written
// by two), as on any net.Conn.
type Conn struct {
	*net.TCPConn
	// The raw connection's Read and Write, bound once, as are the ops'
	// callbacks: a Read or Write allocates nothing.
	rawRead, rawWrite func(func(fd uintptr) bool) error
	r, w              op
	// awFn is WriteAwaitRead's callback, bound once; it writes through w
	// (whose lock WriteAwaitRead holds), and awaiting says that all of w.p
	// went out and the wait for an answer began.
	awFn     func(fd uintptr) bool
	awaiting bool
	// afterWrite, set by tests, runs between WriteAwaitRead's write and its
	// wait: where an answer that arrives at once must not be missed.
	afterWrite func()
}

// op is one direction's call in progress: the poller calls fn, with the
// descriptor, until it reports done.
type op struct {
	mu    sync.Mutex // one call at a time owns the fields below
	fn    func(fd uintptr) bool
	p     []byte
	n     int
	errno syscall.Errno
}

func (o *op) do(raw func(func(fd uintptr) bool) error, p []byte) (int, syscall.Errno, error) {
	o.mu.Lock()
	o.p, o.n, o.errno = p, 0, 0
	err := raw(o.fn)
	n, errno := o.n, o.errno
	o.p = nil
	o.mu.Unlock()
	return n, errno, err
}

// Wrap returns c as a Conn when it is a *net.TCPConn, else c itself (and c
// itself in race-detector builds: see race.go).
func Wrap(c net.Conn) net.Conn {
	if raceEnabled {
		return c
	}
	return wrap(c)
}

func wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	w := &Conn{TCPConn: tc, rawRead: rc.Read, rawWrite: rc.Write}
	w.r.fn, w.w.fn, w.awFn = w.readSome, w.writeSome, w.awaitSome
	return w
}

// Read reads what is there, waiting in the poller while nothing is; at the
// end of the stream it returns io.EOF, and errors are *net.OpError, as from
// net.TCPConn.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := c.r.do(c.rawRead, p)
	if err := c.opError("read", errno, err); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// readSome reads once; false asks the poller to wait until there is more.
func (c *Conn) readSome(fd uintptr) bool { return c.r.run(fd, syscall.SYS_READ, false) }

// Write writes all of p unless the connection fails, its write deadline
// passes or it is closed; errors are *net.OpError as from net.TCPConn.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := c.w.do(c.rawWrite, p)
	return n, c.opError("write", errno, err)
}

// writeSome writes what it can; false asks the poller to wait until the
// socket takes more.
func (c *Conn) writeSome(fd uintptr) bool { return c.w.run(fd, syscall.SYS_WRITE, true) }

// WriteAwaitRead writes all of p, as Write does, then waits until there is
// something to read (or the read deadline passes, or the connection is
// closed) — without the read that would find nothing. A request's answer is
// never there right after the request is written, so a plain Write and Read
// pay a read(2) that returns EAGAIN before the wait; here the wait for
// readability is armed before the write (inside the poller's read call), so
// an answer that arrives at once is not missed. What the wait met — an
// answer, the end, an error, a passed deadline — the next Read reports. When
// the socket takes only part of p at once, the rest goes as Write sends it,
// and the next Read waits as usual.
func (c *Conn) WriteAwaitRead(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.r.mu.Lock()
	c.w.p, c.w.n, c.w.errno = p, 0, 0
	_ = c.rawRead(c.awFn) // the wait's outcome is the next Read's
	c.awaiting = false
	c.r.mu.Unlock()
	var err error
	if c.w.errno == 0 && c.w.n < len(p) {
		// The socket was full, or the poller refused the read (a read
		// deadline already passed): the rest the ordinary way.
		err = c.rawWrite(c.w.fn)
	}
	n, errno := c.w.n, c.w.errno
	c.w.p = nil
	return n, c.opError("write", errno, err)
}

// awaitSome is WriteAwaitRead's callback: first the write, then false to
// wait for readability; called again, the wait is over.
func (c *Conn) awaitSome(fd uintptr) bool {
	if c.awaiting {
		return true
	}
	if !c.w.run(fd, syscall.SYS_WRITE, true) || c.w.errno != 0 {
		return true // full (WriteAwaitRead finishes it the ordinary way) or failed
	}
	c.awaiting = true
	if c.afterWrite != nil {
		c.afterWrite()
	}
	return false
}

// run makes the system call trap on what is left of o.p until one call has
// succeeded (or, with all, until all of o.p is done) or failed; false asks the
// poller to wait (EAGAIN).
func (o *op) run(fd, trap uintptr, all bool) bool {
	for {
		n, e := call(trap, fd, o.p[o.n:])
		switch e {
		case 0:
			o.n += int(n)
			if !all || o.n == len(o.p) {
				return true
			}
		case syscall.EAGAIN:
			return false
		case syscall.EINTR:
		default:
			o.errno = e
			return true
		}
	}
}

// call is read(2) or write(2) of b: raw up to rawMax bytes, else through Go's
// system-call path.
func call(trap, fd uintptr, b []byte) (uintptr, syscall.Errno) {
	if len(b) <= rawMax {
		n, _, e := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		return n, e
	}
	n, _, e := syscall.Syscall(trap, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return n, e
}

// opError is a call's failure as net.TCPConn reports it, or nil: an errno of
// the system call, or the raw connection's error (a *net.OpError of
// "raw-read" or "raw-write", whose cause is kept) as one of op.
func (c *Conn) opError(op string, errno syscall.Errno, err error) error {
	switch {
	case err != nil:
		if oe, ok := err.(*net.OpError); ok {
			err = oe.Err
		}
	case errno != 0:
		err = os.NewSyscallError(op, errno)
	default:
		return nil
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
