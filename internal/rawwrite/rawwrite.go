// Package rawwrite writes to TCP connections with a raw write(2), one that
// keeps the calling goroutine's P (the Go scheduler's processor) through the
// call.
//
// Why: Go's own Write goes through the scheduler's system-call path, and the
// scheduler's monitor thread (sysmon) takes the P from a thread it sees in one
// system call for a whole tick (20 µs and up) and hands it to another thread;
// with one P (the hub's default -max-procs on a small machine) it does so
// whether or not there is other work. A write to a loopback socket runs the
// receiving side of TCP too and often outlasts that tick, so every command
// woke a thread that found nothing to do and went back to sleep, and the
// writer then had to get its P back. The sockets are non-blocking, so a raw
// write never waits: it copies what fits and returns, and when nothing fits
// the write waits in Go's poller as usual (deadlines and Close work as
// before). Measured on the proxy scenario at 32 sessions: the hub's CPU per
// command 60–65 µs → 51–55 µs with the driver side alone written this way.
package rawwrite

import (
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// rawMax bounds what one raw write copies (tens of µs): a larger write — a
// screenshot, a file, a burst of VNC frames — may keep the P long enough for
// the hub's other goroutines to notice, so it takes Go's ordinary system-call
// path, on which sysmon may lend the P to them meanwhile.
const rawMax = 64 << 10

// Conn is a TCP connection whose Write is a raw write; everything else is the
// *net.TCPConn's, so it still offers SyscallConn, CloseWrite, ReadFrom and the
// rest. Writes may come from several goroutines (a hijacked WebSocket is
// written by two), as on any net.Conn.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

	mu    sync.Mutex // one Write at a time owns the fields below
	send  func(fd uintptr) bool
	p     []byte
	n     int
	errno syscall.Errno
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
	w.send = w.sendSome // bound once, so that a Write allocates nothing
	return w
}

// Write writes all of p unless the connection fails, its write deadline
// passes or it is closed; errors are *net.OpError as from net.TCPConn.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.p, c.n, c.errno = p, 0, 0
	err := c.rc.Write(c.send)
	n, errno := c.n, c.errno
	c.p = nil
	c.mu.Unlock()
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	if err != nil {
		if op, ok := err.(*net.OpError); ok {
			err = op.Err // the raw-write wrapper's; rewrapped as a write below
		}
		return n, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return n, nil
}

// sendSome writes what it can; false asks the poller to wait until the socket
// takes more.
func (c *Conn) sendSome(fd uintptr) bool {
	for c.n < len(c.p) {
		var n uintptr
		var e syscall.Errno
		if len(c.p)-c.n <= rawMax {
			n, _, e = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.p[c.n])), uintptr(len(c.p)-c.n))
		} else {
			n, _, e = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.p[c.n])), uintptr(len(c.p)-c.n))
		}
		switch {
		case e == syscall.EAGAIN:
			return false
		case e == syscall.EINTR:
			continue
		case e != 0:
			c.errno = e
			return true
		}
		c.n += int(n)
	}
	return true
}
