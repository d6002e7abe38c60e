package egress

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
)

// AttachedNetworks lists the networks of the host's own interfaces that are
// neither loopback nor the way out: every interface that carries no default
// route (IPv4 or IPv6). Those are the bridges and virtual interfaces the host
// makes for its own guests — Docker's docker0, br-… (a session's network),
// veth… — whose addresses no routed destination has. The rule needs no list
// of interface names, and holds for any bridge Docker or the operator adds;
// on a host without a default route, every non-loopback network is refused.
// It asks the kernel afresh (two netlink dumps and two /proc files), as
// sessions' networks come and go.
func AttachedNetworks() ([]Network, error) {
	defaults := map[string]bool{}
	for _, f := range []struct {
		path  string
		parse func([]byte, map[string]bool)
	}{{"/proc/net/route", defaultRoutes4}, {"/proc/net/ipv6_route", defaultRoutes6}} {
		b, err := os.ReadFile(f.path)
		if err != nil && !(os.IsNotExist(err) && f.path == "/proc/net/ipv6_route") { // IPv6 may be off
			return nil, fmt.Errorf("reading the default routes: %w", err)
		}
		f.parse(b, defaults)
	}
	links, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing the host's interfaces: %w", err)
	}
	addrs, err := interfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the host's interface addresses: %w", err)
	}
	return attached(links, addrs, defaults), nil
}

// ifaceAddr is one address of an interface, by index.
type ifaceAddr struct {
	index  int
	prefix netip.Prefix
}

// attached is AttachedNetworks' rule on what the kernel said.
func attached(links []net.Interface, addrs []ifaceAddr, defaults map[string]bool) []Network {
	byIndex := map[int]net.Interface{}
	for _, l := range links {
		byIndex[l.Index] = l
	}
	var out []Network
	for _, a := range addrs {
		l, ok := byIndex[a.index]
		if ok && (l.Flags&net.FlagLoopback != 0 || defaults[l.Name]) {
			continue
		}
		name := l.Name
		if !ok { // added since the links were listed: no default route yet
			name = fmt.Sprintf("interface %d", a.index)
		}
		out = append(out, Network{Prefix: a.prefix.Masked(), Interface: name})
	}
	return out
}

// Route flags of linux/route.h.
const (
	rtfUp     = 0x0001
	rtfReject = 0x0200
)

// defaultRoutes4 adds the interfaces of /proc/net/route's usable default
// routes (destination and mask 0, up, not a reject route).
func defaultRoutes4(b []byte, into map[string]bool) {
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 8 { // the header
			continue
		}
		var flags uint32
		if _, err := fmt.Sscanf(f[3], "%x", &flags); err != nil {
			continue
		}
		if f[1] == "00000000" && f[7] == "00000000" && flags&rtfUp != 0 && flags&rtfReject == 0 {
			into[f[0]] = true
		}
	}
}

// defaultRoutes6 does the same for /proc/net/ipv6_route (::/0).
func defaultRoutes6(b []byte, into map[string]bool) {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		var flags uint32
		if _, err := fmt.Sscanf(f[8], "%x", &flags); err != nil {
			continue
		}
		if f[0] == "00000000000000000000000000000000" && f[1] == "00" && flags&rtfUp != 0 && flags&rtfReject == 0 {
			into[f[9]] = true
		}
	}
}

// interfaceAddrs is every address of every interface, with its interface's
// index, in one netlink dump (net.Interface.Addrs makes one per interface).
func interfaceAddrs() ([]ifaceAddr, error) {
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETADDR, syscall.AF_UNSPEC)
	if err != nil {
		return nil, os.NewSyscallError("netlinkrib", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return nil, os.NewSyscallError("parsenetlinkmessage", err)
	}
	var out []ifaceAddr
	for _, m := range msgs {
		if m.Header.Type == syscall.NLMSG_DONE {
			break
		}
		if m.Header.Type != syscall.RTM_NEWADDR || len(m.Data) < syscall.SizeofIfAddrmsg {
			continue
		}
		// struct ifaddrmsg: family, prefixlen, flags, scope (a byte each),
		// then the interface's index.
		bits, index := int(m.Data[1]), int(binary.NativeEndian.Uint32(m.Data[4:8]))
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return nil, os.NewSyscallError("parsenetlinkrouteattr", err)
		}
		for _, a := range attrs {
			if a.Attr.Type != syscall.IFA_ADDRESS {
				continue
			}
			if ip, ok := netip.AddrFromSlice(a.Value); ok {
				out = append(out, ifaceAddr{index: index, prefix: netip.PrefixFrom(ip, bits)})
			}
		}
	}
	return out, nil
}
