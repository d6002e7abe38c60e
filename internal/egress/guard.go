package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"github.com/websummoner/websummoner/internal/netns"
)

// errUnresolved is a destination whose name gave no address.
var errUnresolved = errors.New("the name does not resolve")

// Guard decides where a sandboxed browser's connections may go, and makes
// them from the hub's own network namespace. It resolves a name itself,
// checks every address the name has, and dials only the addresses it checked,
// so a name that resolves differently on a second look (DNS rebinding) still
// goes nowhere refused.
//
// Refused, whatever the port:
//   - 127.100.0.0/16, the sandboxes' addresses (netns.Range);
//   - the networks of the host's own interfaces other than loopback and the
//     interfaces that carry a default route: a Docker bridge (docker0, br-…,
//     a session's own network), whose containers — other sessions' browsers —
//     take connections from the host as from the hub;
//   - link-local addresses (169.254.0.0/16, fe80::/10: cloud metadata
//     services), unspecified, multicast and broadcast addresses;
//   - a loopback port a Docker session of this hub publishes (Guard.Ports),
//     and every port of a Docker engine on another host, where they publish.
//
// Allowed: the rest of loopback (the host's own services, the application a
// user tests on localhost) and whatever the default route reaches.
//
// The zero value is ready to use.
type Guard struct {
	// Dialer makes the checked connections.
	Dialer net.Dialer
	// Lookup resolves a host name; nil: the host's resolver
	// (net.DefaultResolver.LookupNetIP). It is asked once per connection.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Attached lists the networks of the host's own bridges, asked again for
	// each connection, as sessions' networks come and go; nil:
	// AttachedNetworks.
	Attached func() ([]Network, error)
	// Ports are the loopback ports refused: the ones this hub's Docker
	// sessions publish, which the Docker launcher records there
	// (docker.Options.Published). Nil: none.
	Ports *PortSet
}

// Network is a network directly attached to one of the host's interfaces.
type Network struct {
	Prefix    netip.Prefix
	Interface string
}

// RefusedError is a destination the guard refuses; the proxy answers it 403
// with the error's text.
type RefusedError struct {
	// Dest is the destination asked for, host:port.
	Dest string
	// IP is the address refused, among the name's addresses.
	IP netip.Addr
	// Why says what the address is.
	Why string
}

func (e *RefusedError) Error() string {
	at := e.IP.String()
	if h, _, _ := net.SplitHostPort(e.Dest); h == at {
		at = "it"
	}
	return fmt.Sprintf("websummoner: this session's proxy refuses %s: %s is %s. A sandboxed browser reaches the host's loopback and what the host's default route reaches, never another session's browser (docs/security.md, \"Isolation between sessions\")", e.Dest, at, e.Why)
}

// Check says why ip is refused, or nil when it may be dialled, given the
// host's attached networks.
func (g *Guard) Check(ip netip.Addr, port uint16, attached []Network) error {
	ip = ip.Unmap()
	dest := netip.AddrPortFrom(ip, port).String()
	refuse := func(why string) error { return &RefusedError{Dest: dest, IP: ip, Why: why} }
	switch {
	case netns.Range().Contains(ip):
		return refuse("an address of a session's sandbox (" + netns.Range().String() + ")")
	case g.Ports.HoldsHost(ip):
		return refuse("the host of this hub's Docker engine, where its sessions' containers publish their ports")
	case ip.IsLoopback():
		if g.Ports.Holds(port) {
			return refuse(fmt.Sprintf("on the host's loopback, and port %d is a Docker session's", port))
		}
		return nil
	case ip.IsLinkLocalUnicast():
		return refuse("link-local (where cloud metadata services answer)")
	case ip.IsUnspecified() || ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return refuse("not the address of one host")
	}
	for _, n := range attached {
		if n.Prefix.Contains(ip) {
			return refuse(fmt.Sprintf("on %s (%s), a network of one of the host's own bridges, where sessions' containers are", n.Interface, n.Prefix))
		}
	}
	return nil
}

// DialContext connects to addr (host:port, TCP only) if every address of
// host is allowed, by dialling those addresses in turn. A refusal is a
// *RefusedError.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, fmt.Errorf("the session's proxy makes TCP connections only, not %s", network)
	}
	host, portName, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("the session's proxy was asked for %q, not host:port: %w", addr, err)
	}
	port, err := strconv.ParseUint(portName, 10, 16)
	if err != nil {
		p, lerr := net.DefaultResolver.LookupPort(ctx, "tcp", portName)
		if lerr != nil {
			return nil, fmt.Errorf("the session's proxy was asked for port %q: %w", portName, lerr)
		}
		port = uint64(p)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = g.lookup(ctx, host); err != nil {
		return nil, fmt.Errorf("the session's proxy could not resolve %s: %w: %w", host, errUnresolved, err)
	} else if len(ips) == 0 {
		return nil, fmt.Errorf("the session's proxy could not resolve %s: %w: no address", host, errUnresolved)
	}
	attached, err := g.attached()
	if err != nil {
		// Unsure which networks are the bridges': nothing is dialled.
		return nil, fmt.Errorf("the session's proxy cannot tell the host's bridge networks, so it dials nothing: %w", err)
	}
	for _, ip := range ips {
		if err := g.Check(ip, uint16(port), attached); err != nil {
			var re *RefusedError
			if errors.As(err, &re) {
				re.Dest = addr
			}
			return nil, err
		}
	}
	var errs []error
	for _, ip := range ips {
		c, err := g.Dialer.DialContext(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (g *Guard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if g.Lookup != nil {
		return g.Lookup(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

func (g *Guard) attached() ([]Network, error) {
	if g.Attached != nil {
		return g.Attached()
	}
	return AttachedNetworks()
}

// PortSet is a set of loopback ports, safe for concurrent use. The Docker
// launcher adds the ports a container publishes on the host's loopback (its
// driver, DevTools, VNC, file and clipboard services, which take a connection
// from there as one from the hub) when it starts and removes them when it is
// gone. A nil *PortSet is empty and takes nothing.
//
// It also holds the addresses of a Docker engine on another host
// (DOCKER_HOST=tcp://…), where containers publish their ports instead:
// every port there is refused.
type PortSet struct {
	mu    sync.Mutex
	ports map[uint16]int
	hosts []netip.Addr
}

// AddHosts refuses every port of addrs: a Docker engine's host.
func (s *PortSet) AddHosts(addrs ...netip.Addr) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range addrs {
		if a = a.Unmap().WithZone(""); !slices.Contains(s.hosts, a) {
			s.hosts = append(s.hosts, a)
		}
	}
}

// HoldsHost says whether every port of ip is refused.
func (s *PortSet) HoldsHost(ip netip.Addr) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.hosts, ip.Unmap().WithZone(""))
}

// Add puts ports in the set; a port added twice stays until removed twice.
func (s *PortSet) Add(ports ...uint16) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports == nil {
		s.ports = map[uint16]int{}
	}
	for _, p := range ports {
		s.ports[p]++
	}
}

// Remove takes ports out of the set, once for each Add.
func (s *PortSet) Remove(ports ...uint16) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ports {
		if s.ports[p] <= 1 {
			delete(s.ports, p)
		} else {
			s.ports[p]--
		}
	}
}

// Holds says whether port is in the set.
func (s *PortSet) Holds(port uint16) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ports[port] > 0
}
