// Package netns dials into other network namespaces: a local driver that runs
// in a namespace of its own (a sandbox) listens on that namespace's loopback,
// which nothing else on the machine reaches, and the hub connects to it by
// opening its socket from inside the namespace.
//
// Each sandbox is known to the hub by an address of its own in 127.100.0.0/16:
// a driver's URL carries it (chromedriver accepts an IP literal in Host), and
// Dialer.DialContext turns a dial to it into a dial of 127.0.0.1 in the
// sandbox's namespace. An address of that range that no sandbox holds is
// refused, never dialled on the hub's own loopback. Dialer.Listen opens a
// socket of the hub's on a sandbox's loopback the same way: the sandbox's
// way out (internal/egress) is served there.
package netns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// prefix is the range sandbox addresses are drawn from.
var prefix = netip.MustParsePrefix("127.100.0.0/16")

// Range is the range sandbox addresses are drawn from: nothing on the host
// listens there, and a connection to it is meant for a sandbox.
func Range() netip.Prefix { return prefix }

// Dialer dials TCP like net.Dialer, and into a sandbox's network namespace
// for an address a sandbox holds. The zero value is not usable; use New.
type Dialer struct {
	// Dialer is used for every connection, in whichever namespace.
	net.Dialer

	mu    sync.Mutex
	ns    map[netip.Addr]*os.File // address → the namespace (/proc/PID/ns/net)
	next  uint32
	local *os.File // the hub's own namespace, to return to
}

// New returns a Dialer with d's settings.
func New(d net.Dialer) *Dialer {
	return &Dialer{Dialer: d, ns: map[netip.Addr]*os.File{}}
}

// Holds reports whether addr (host or host:port) is in the sandbox range.
func Holds(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	return err == nil && prefix.Contains(a)
}

// Add opens the network namespace of process pid and returns the address
// that stands for it, until Remove.
func (d *Dialer) Add(pid int) (netip.Addr, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("opening the sandbox's network namespace: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.local == nil {
		if d.local, err = os.Open("/proc/thread-self/ns/net"); err != nil {
			d.local = nil
			f.Close()
			return netip.Addr{}, fmt.Errorf("opening the hub's own network namespace: %w", err)
		}
	}
	for range 1 << 16 {
		d.next++
		n := d.next % (1 << 16)
		a := netip.AddrFrom4([4]byte{127, 100, byte(n >> 8), byte(n)})
		if n == 0 || n == 0xffff || d.ns[a] != nil {
			continue
		}
		d.ns[a] = f
		return a, nil
	}
	f.Close()
	return netip.Addr{}, fmt.Errorf("every sandbox address of %v is taken", prefix)
}

// Remove forgets the sandbox at a and closes its namespace handle.
func (d *Dialer) Remove(a netip.Addr) {
	d.mu.Lock()
	f := d.ns[a]
	delete(d.ns, a)
	d.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// DialContext dials addr; an address of a sandbox is dialled as 127.0.0.1 in
// its namespace.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return d.Dialer.DialContext(ctx, network, addr)
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !prefix.Contains(a) {
		return d.Dialer.DialContext(ctx, network, addr)
	}
	d.mu.Lock()
	f, local := d.ns[a], d.local
	d.mu.Unlock()
	if f == nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("no sandbox holds %s any more: its session has ended", host)}
	}
	return dialIn(ctx, &d.Dialer, f, local, network, net.JoinHostPort("127.0.0.1", port))
}

// Listen opens a TCP listener at addr (host:port, the host an address of the
// sandbox's own, such as 127.0.0.1) in the network namespace of the sandbox
// at a: a service of the hub's that only that sandbox reaches. The listener
// keeps the namespace alive until it is closed.
func (d *Dialer) Listen(ctx context.Context, a netip.Addr, addr string) (net.Listener, error) {
	d.mu.Lock()
	f, local := d.ns[a], d.local
	d.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("listening in sandbox %s: no sandbox holds that address any more: its session has ended", a)
	}
	ln, err := listenIn(ctx, f, local, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s in sandbox %s: %w", addr, a, err)
	}
	return ln, nil
}

// Child waits for the first child of process pid (bubblewrap's sandboxed
// process, whose namespaces are the sandbox's) and returns its pid.
func Child(ctx context.Context, pid int) (int, error) {
	path := fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)
	wait := 500 * time.Microsecond
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("finding the sandbox's process: %w", err)
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			return strconv.Atoi(f[0])
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}
