package hangup

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
)

// On Linux each watched descriptor is registered, for hang-ups only
// (EPOLLRDHUP; EPOLLHUP and EPOLLERR always count), in an epoll instance of
// the watcher's that one goroutine waits on. Go's poller keeps its own
// registration of the same descriptor: the two are independent.
// Registrations are one-shot and added and removed only while the descriptor
// is held (RawConn.Control), so a number the kernel has reused for another
// connection is never touched. The instance, its goroutine and its
// descriptors exist only while something is watched.

// instance is one epoll descriptor, its wake-up pipe and what it watches.
type instance struct {
	epfd         int
	wakeR, wakeW *os.File // a byte on the pipe wakes the loop to look again
	byKey        map[int32]func()
	done         chan struct{} // closed when the loop has closed the instance
	tid          atomic.Int32  // the loop's thread
}

// wakeKey marks the wake-up pipe's registration.
const wakeKey = -1

func newInstance() (*instance, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: wakeKey}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(r.Fd()), &ev); err != nil {
		syscall.Close(epfd)
		r.Close()
		w.Close()
		return nil, err
	}
	return &instance{epfd: epfd, wakeR: r, wakeW: w, byKey: map[int32]func(){}, done: make(chan struct{})}, nil
}

func (in *instance) close() {
	syscall.Close(in.epfd)
	in.wakeR.Close()
	in.wakeW.Close()
	close(in.done)
}

// loop reports hang-ups until nothing is watched, then closes the instance.
// It keeps its thread: it spends its life in epoll_wait, which holds one
// anyway, and the thread's id lets a test interrupt exactly that call.
func (w *Watcher) loop(in *instance) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	in.tid.Store(int32(syscall.Gettid()))
	events := make([]syscall.EpollEvent, 64)
	drain := make([]byte, 64)
	for {
		n, err := syscall.EpollWait(in.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue // a signal (Go's own preemption among them), not an event
		}
		if err != nil {
			// Cannot happen with a valid descriptor and buffer; give every
			// watch its answer rather than leave it waiting for ever.
			n = 0
			w.mu.Lock()
			for k := range in.byKey {
				events = append(events[:n], syscall.EpollEvent{Fd: k})
				n++
			}
			w.mu.Unlock()
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
		w.mu.Lock()
		if len(in.byKey) == 0 {
			w.inst = nil
			w.mu.Unlock()
			in.close()
			return
		}
		w.mu.Unlock()
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

func (w *Watcher) watch(c net.Conn, gone func()) (func(), bool) {
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
		ctlErr = syscall.EpollCtl(in.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
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
