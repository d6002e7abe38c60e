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
// afterwards. The thread goes back before it is unlocked; one that cannot
// is never unlocked, so Go ends it with the goroutine instead of reusing it.
func dialIn(ctx context.Context, d *net.Dialer, ns, local *os.File, network, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering the sandbox's network namespace: %w", err)
	}
	c, err := d.DialContext(ctx, network, addr)
	if serr := unix.Setns(int(local.Fd()), unix.CLONE_NEWNET); serr != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("returning from the sandbox's network namespace: %w", serr)
	}
	runtime.UnlockOSThread()
	return c, err
}
