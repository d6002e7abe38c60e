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
	rc syscall.RawConn

	rmu  sync.Mutex // one Read at a time owns the fields below
	recv func(fd uintptr) bool
	rp   []byte
	rn   int
	rerr syscall.Errno

	wmu  sync.Mutex // one Write at a time owns the fields below
	send func(fd uintptr) bool
	wp   []byte
	wn   int
	werr syscall.Errno
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
	w := &Conn{TCPConn: tc, rc: rc}
	// Bound once, so that a Read or Write allocates nothing.
	w.recv, w.send = w.readSome, w.writeSome
	return w
}

// Read reads what is there, waiting in the poller while nothing is; at the
// end of the stream it returns io.EOF, and errors are *net.OpError, as from
// net.TCPConn.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.rp, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.recv)
	n, errno := c.rn, c.rerr
	c.rp = nil
	c.rmu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readSome reads once; false asks the poller to wait until there is more.
func (c *Conn) readSome(fd uintptr) bool {
	for {
		var n uintptr
		var e syscall.Errno
		if len(c.rp) <= rawMax {
			n, _, e = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		} else {
			n, _, e = syscall.Syscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		}
		switch e {
		case 0:
			c.rn = int(n)
			return true
		case syscall.EAGAIN:
			return false
		case syscall.EINTR:
			continue
		default:
			c.rerr = e
			return true
		}
	}
}

// Write writes all of p unless the connection fails, its write deadline
// passes or it is closed; errors are *net.OpError as from net.TCPConn.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.wp, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.send)
	n, errno := c.wn, c.werr
	c.wp = nil
	c.wmu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// writeSome writes what it can; false asks the poller to wait until the
// socket takes more.
func (c *Conn) writeSome(fd uintptr) bool {
	for c.wn < len(c.wp) {
		var n uintptr
		var e syscall.Errno
		if len(c.wp)-c.wn <= rawMax {
			n, _, e = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.wp[c.wn])), uintptr(len(c.wp)-c.wn))
		} else {
			n, _, e = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.wp[c.wn])), uintptr(len(c.wp)-c.wn))
		}
		switch e {
		case 0:
			c.wn += int(n)
		case syscall.EAGAIN:
			return false
		case syscall.EINTR:
		default:
			c.werr = e
			return true
		}
	}
	return true
}

// opError is err as net.TCPConn reports it: the raw call's wrapper (a
// *net.OpError of "raw-read" or "raw-write") replaced by one of op.
func (c *Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
