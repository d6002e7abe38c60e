package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// dialIn opens the connection from a thread moved into the namespace: a
// socket belongs to the namespace it was made in, wherever it is used from
// afterwards.
func dialIn(ctx context.Context, d *net.Dialer, ns, local *os.File, network, addr string) (c net.Conn, err error) {
	if nerr := within(ns, local, func() { c, err = d.DialContext(ctx, network, addr) }, func() {
		if c != nil {
			c.Close()
		}
	}); nerr != nil {
		return nil, nerr
	}
	return c, err
}

// listenIn opens a listening socket from a thread moved into the namespace:
// it accepts the namespace's connections, whichever thread accepts them.
func listenIn(ctx context.Context, ns, local *os.File, network, addr string) (ln net.Listener, err error) {
	if nerr := within(ns, local, func() { ln, err = new(net.ListenConfig).Listen(ctx, network, addr) }, func() {
		if ln != nil {
			ln.Close()
		}
	}); nerr != nil {
		return nil, nerr
	}
	return ln, err
}

// within runs fn on a thread moved into the namespace ns, then moves the
// thread back to local. The thread goes back before it is unlocked; one that
// cannot is never unlocked, so Go ends it with the goroutine instead of
// reusing it, and undo releases what fn made, as nothing may be used from a
// thread whose namespace is unknown.
func within(ns, local *os.File, fn, undo func()) error {
	runtime.LockOSThread()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering the sandbox's network namespace: %w", err)
	}
	fn()
	if err := unix.Setns(int(local.Fd()), unix.CLONE_NEWNET); err != nil {
		undo()
		return fmt.Errorf("returning from the sandbox's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return nil
}
