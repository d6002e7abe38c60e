package hangup

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// On Linux each watched descriptor is registered, for hang-ups only
// (EPOLLRDHUP; EPOLLHUP and EPOLLERR always count), in an epoll instance of
// the watcher's that one goroutine waits on. Go's poller keeps its own
// registration of the same descriptor: the two are independent.
// Registrations are one-shot and added, re-armed and removed only while the
// descriptor is held (RawConn.Control), so a number the kernel has reused for
// another connection is never touched; one that fired stays in the set,
// disarmed, until the connection closes or is watched again. The instance,
// its goroutine and its descriptors exist only while something is watched.
//
// The goroutine waits in Go's poller, on the epoll descriptor itself (readable
// while it has events), not in epoll_wait: a goroutine blocked in a system
// call holds its thread and, until the runtime notices, its CPU slot, which is
// the hub's only one when it runs with GOMAXPROCS=1.

// instance is one epoll descriptor, its wake-up pipe and what it watches.
type instance struct {
	ep           *os.File // the epoll descriptor, non-blocking, in Go's poller
	epfd         int      // ep's descriptor, for epoll_ctl (ep.Fd would make it blocking)
	wakeR, wakeW *os.File // a byte on the pipe wakes the loop to look again
	byKey        map[int32]func()
	done         chan struct{} // closed when the loop has closed the instance
}

// wakeKey marks the wake-up pipe's registration.
const wakeKey = -1

func newInstance() (*instance, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	ep := os.NewFile(uintptr(epfd), "hangup epoll")
	// A file Go's poller would not take has no deadlines: Watch then falls
	// back to a goroutine per connection rather than a loop that cannot wait.
	if err := ep.SetReadDeadline(time.Time{}); err != nil {
		ep.Close()
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		ep.Close()
		return nil, err
	}
	wc, err := r.SyscallConn()
	if err == nil {
		cerr := wc.Control(func(fd uintptr) {
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: wakeKey}
			err = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
		})
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		ep.Close()
		r.Close()
		w.Close()
		return nil, err
	}
	return &instance{ep: ep, epfd: epfd, wakeR: r, wakeW: w, byKey: map[int32]func(){}, done: make(chan struct{})}, nil
}

func (in *instance) close() {
	in.ep.Close()
	in.wakeR.Close()
	in.wakeW.Close()
	close(in.done)
}

// loop reports hang-ups until nothing is watched, then closes the instance.
func (w *Watcher) loop(in *instance) {
	events := make([]syscall.EpollEvent, 64)
	drain := make([]byte, 64)
	rc, err := in.ep.SyscallConn()
	if err == nil {
		// The callback runs whenever the epoll descriptor is readable; it
		// takes every event there is (Go's poller reports edges), and asks
		// to wait again only once there are none.
		// Read's own error needs no handling: however it ends, every watch
		// is answered below.
		_ = rc.Read(func(fd uintptr) bool {
			for {
				n, err := syscall.EpollWait(int(fd), events, 0)
				if errors.Is(err, syscall.EINTR) {
					continue
				}
				if err != nil {
					return true // cannot happen with a valid descriptor: answer every watch below
				}
				if n == 0 {
					w.mu.Lock()
					defer w.mu.Unlock()
					if len(in.byKey) == 0 {
						w.inst = nil
						return true
					}
					return false
				}
				for _, ev := range events[:n] {
					if ev.Fd == wakeKey {
						_, _ = in.wakeR.Read(drain)
						continue
					}
					w.mu.Lock()
					gone := in.byKey[ev.Fd]
					delete(in.byKey, ev.Fd)
					w.mu.Unlock()
					if gone != nil {
						gone()
					}
				}
			}
		})
	}
	// Ended without closing (an error): give every watch its answer rather
	// than leave it waiting for ever.
	w.mu.Lock()
	var left []func()
	if w.inst == in {
		w.inst = nil
		for k, gone := range in.byKey {
			left = append(left, gone)
			delete(in.byKey, k)
		}
	}
	w.mu.Unlock()
	in.close()
	for _, gone := range left {
		gone()
	}
}

// rawConn finds the descriptor under c: TCP and Unix connections, also under TLS.
func rawConn(c net.Conn) (syscall.RawConn, bool) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}

func (w *Watcher) watch(c net.Conn, gone func(), readable bool) (func(), bool) {
	rc, ok := rawConn(c)
	if !ok {
		return nil, false
	}
	w.mu.Lock()
	in := w.inst
	if in == nil {
		var err error
		if in, err = newInstance(); err != nil {
			w.mu.Unlock()
			return nil, false
		}
		w.inst = in
		go w.loop(in)
	}
	for { // keys wrap after 2^31 watches: skip wakeKey and live keys
		w.next++
		if _, used := in.byKey[w.next]; w.next >= 0 && !used {
			break
		}
	}
	key := w.next
	// Registered before the descriptor is added: while a key is there the
	// instance stays.
	in.byKey[key] = gone
	w.mu.Unlock()
	var ctlErr error
	err := rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: key}
		if readable {
			ev.Events |= syscall.EPOLLIN
		}
		ctlErr = syscall.EpollCtl(in.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
		if ctlErr == syscall.EEXIST {
			// A one-shot registration that fired stays in the set, disarmed
			// (only stop removes one, and not after it fired): the same
			// connection watched again, as the HTTP server's gate does after
			// each request answered on a connection it took back, re-arms it.
			ctlErr = syscall.EpollCtl(in.epfd, syscall.EPOLL_CTL_MOD, int(fd), &ev)
		}
	})
	if err == nil {
		err = ctlErr
	}
	if err != nil {
		w.forget(in, key, nil)
		return nil, false
	}
	return func() { w.forget(in, key, rc) }, true
}

// forget drops a watch, and its registration when the descriptor is given;
// the last one wakes the loop to close the instance. A key the loop has
// already reported is gone from byKey: its instance may be closed by now, and
// its one-shot registration is inert.
func (w *Watcher) forget(in *instance, key int32, rc syscall.RawConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := in.byKey[key]; !ok {
		return
	}
	if rc != nil {
		_ = rc.Control(func(fd uintptr) {
			_ = syscall.EpollCtl(in.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
		})
	}
	delete(in.byKey, key)
	if len(in.byKey) == 0 {
		_, _ = in.wakeW.Write([]byte{0})
	}
}
