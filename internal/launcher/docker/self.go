package docker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"

	"github.com/websummoner/websummoner/internal/logtag"
)

// A hub in a container of the engine it starts browsers on (Selenoid's usual
// deployment: `docker run … -v /var/run/docker.sock:…`) cannot reach ports
// published on the host's 127.0.0.1, which is not its own. With no
// -container-address it finds out whether it is such a container, and if so
// reaches browsers by their address on a network it shares with them. A file
// such as /.dockerenv is no proof: a VM or a container of another engine may
// have one, and then the engine knows no container of that id.

// address is how the hub reaches drivers: -container-address, or, without
// it, ByIP if the hub runs in a container of this engine that is not on the
// host's network, or on the host (or its network) of a local engine whose
// bridges are the host's, without -container-network; Published otherwise.
// The answer is found once, at the first start the engine answers.
func (l *Launcher) address(ctx context.Context) (Address, error) {
	l.mu.Lock()
	a := l.addr
	l.mu.Unlock()
	if a != "" {
		return a, nil
	}
	a = l.opts.Address
	var self string
	if a == "" || a == ByIP {
		id, hostNet, err := l.findSelf(ctx)
		switch {
		case err != nil:
			return "", err
		case id != "" && !hostNet:
			a, self = ByIP, id
		case a == "" && !l.userNetwork() && l.publishedAt() == localEngine && l.bridgesOnHost(ctx):
			// On the host, or in a container on the host's network (which
			// can join no other), of an engine whose bridges are this
			// host's own: each session's network is reached as is, and
			// nothing of a session's is on the host's loopback, where
			// another hub's sandboxed browsers, whose way out refuses
			// bridges but not loopback, could reach a published port.
			a = ByIP
		case a == "":
			// Rootless or in a VM (Docker Desktop), the engine's bridges
			// are not this host's; on the operator's -container-network,
			// which may be no bridge: 127.0.0.1 is where published ports
			// are, as under Selenoid.
			a = Published
		}
		// An explicit ByIP with no container to join: the host's network
		// reaches each container's address through its network's bridge.
	}
	if self != "" && l.userNetwork() {
		// On a shared network the hub must be there too, as Selenoid must.
		err := l.engine.NetworkConnect(ctx, l.opts.Network, self, &network.EndpointSettings{})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return "", fmt.Errorf("joining the hub's container %s to -container-network %q: %w", shortID(self), l.opts.Network, err)
		}
	}
	var from string
	if pub := l.publishedAt(); a == Published && pub != localEngine {
		// The engine's host publishes every session's ports: no sandboxed
		// local browser may go there. Its containers take the hub's
		// connections from the address the hub's host sends from, which
		// Docker's port mapping keeps.
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", pub.host)
		if err != nil {
			return "", fmt.Errorf("resolving the Docker engine's host %q (DOCKER_HOST): %w", pub.host, err)
		}
		// A loopback engine's ports are refused one by one (loopbackPorts):
		// the rest of loopback is the sandboxes' to reach.
		l.opts.Published.AddHosts(slices.DeleteFunc(ips, netip.Addr.IsLoopback)...)
		from = localAddrToward(pub.host)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addr == "" {
		l.addr, l.self, l.fromHub = a, self, from
		if pub := l.publishedAt(); a == Published && pub != localEngine {
			logtag.Event(l.log, slog.LevelWarn, "", "INIT", fmt.Sprintf("the Docker engine is reached over TCP at %s (DOCKER_HOST): browsers' ports are published on %s there and reached at %s, as Selenoid reaches them; whoever reaches that address reaches them, so let the hub alone", pub.host, pub.bind, pub.host))
		}
		switch {
		case a == ByIP && self == "" && l.opts.Address == "":
			logtag.Event(l.log, slog.LevelInfo, "", "INIT", "the Docker engine's bridges are this host's: browsers are reached by their address on their session's own network, and publish no port on the host (-container-address published to publish them on 127.0.0.1 instead)")
		case a == ByIP && self == "":
			logtag.Event(l.log, slog.LevelInfo, "", "INIT", "-container-address ip: the hub runs in no container of this engine, so it joins no network and dials each browser's address from this host's network")
		}
		if self != "" {
			logtag.Event(l.log, slog.LevelInfo, "", "INIT", "the hub runs in container "+shortID(self)+": browsers are reached by their address on the network it shares with them")
			if forwards() && !l.userNetwork() { // on one shared network, sessions are not apart anyway
				logtag.Event(l.log, slog.LevelWarn, "", "IP_FORWARD", "the hub's container forwards packets (net.ipv4.ip_forward=1) and joins every session's network: run it with --sysctl net.ipv4.ip_forward=0, so that it is no router between sessions")
			}
		}
	}
	return l.addr, nil
}

// bridgesOnHost reports whether the engine's bridges are this host's own:
// the engine is neither rootless nor in a VM (Docker Desktop), whose bridges
// are in a network namespace or machine of their own — though their
// addresses may be the same as a rootful engine's beside them — and one of
// this host's interfaces has an address on its default bridge network
// (docker0). A container's address on a bridge of its is then reached from
// here directly.
func (l *Launcher) bridgesOnHost(ctx context.Context) bool {
	sys, err := l.engine.Info(ctx)
	if err != nil || slices.Contains(sys.SecurityOptions, "name=rootless") || strings.Contains(sys.OperatingSystem, "Docker Desktop") {
		return false
	}
	info, err := l.engine.NetworkInspect(ctx, "bridge", network.InspectOptions{})
	if err != nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, c := range info.IPAM.Config {
		subnet, err := netip.ParsePrefix(c.Subnet)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && subnet.Contains(ip.Unmap()) {
					return true
				}
			}
		}
	}
	return false
}

// mode is how drivers are reached: what address found, or before it has,
// what -container-address says.
func (l *Launcher) mode() Address {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addr == "" {
		return l.opts.Address
	}
	return l.addr
}

// localAddrToward is the address this host's connections to host come
// from, as its routes choose it; "" if it has none. No packet is sent.
func localAddrToward(host string) string {
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return ""
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// fromHubAddress is the address the hub's connections to a remote engine's
// published ports come from ("" for a local engine).
func (l *Launcher) fromHubAddress() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fromHub
}

// forwards reports whether the hub's network namespace forwards IPv4
// packets: a new container's inherits the host's setting, on by Docker.
func forwards() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// selfContainer is the hub's own container, which joins each session's
// network, or "" when there is none to join (a hub on the host's network).
func (l *Launcher) selfContainer() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.self
}

// findSelf is the id of the hub's own container if the engine has one of
// the ids selfCandidates finds, or "", and whether that container is on the
// host's network.
func (l *Launcher) findSelf(ctx context.Context) (id string, hostNet bool, err error) {
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	host, _ := os.Hostname()
	for _, c := range selfCandidates(mountinfo, host) {
		info, err := l.engine.ContainerInspect(ctx, c)
		switch {
		case cerrdefs.IsNotFound(err):
			continue
		case err != nil:
			return "", false, fmt.Errorf("asking the engine whether the hub runs in container %s: %w", c, err)
		case !strings.HasPrefix(info.ID, c): // a container merely named so
		case c == host && (info.Config == nil || info.Config.Hostname != host):
			// A machine whose name looks like an id is no container of
			// that id unless the container has that name too.
		default:
			return info.ID, info.HostConfig != nil && info.HostConfig.NetworkMode.IsHost(), nil
		}
	}
	return "", false, nil
}

var (
	// engineFile is the source of a file the engine mounts into each of its
	// containers, as mountinfo's root field names it.
	engineFile  = regexp.MustCompile(`/containers/([0-9a-f]{64})/(?:hostname|hosts|resolv\.conf)$`)
	shortIDName = regexp.MustCompile(`^[0-9a-f]{12}$`)
)

// selfCandidates are the ids the hub's container may have: the one in the
// source of the files the engine mounts over /etc/hostname, /etc/hosts and
// /etc/resolv.conf in each of its containers, and the host name when it is a
// short id, the engine's default host name. Only those mount points count:
// on the engine's host, mountinfo lists every running container's
// …/containers/<id>/mounts/shm, and none of those is the hub's.
func selfCandidates(mountinfo []byte, hostname string) []string {
	var out []string
	for line := range strings.Lines(string(mountinfo)) {
		// ID parent major:minor root mount-point options …
		f := strings.Fields(line)
		if len(f) < 5 || (f[4] != "/etc/hostname" && f[4] != "/etc/hosts" && f[4] != "/etc/resolv.conf") {
			continue
		}
		if m := engineFile.FindStringSubmatch(f[3]); m != nil && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	if shortIDName.MatchString(hostname) && !slices.ContainsFunc(out, func(id string) bool { return strings.HasPrefix(id, hostname) }) {
		out = append(out, hostname)
	}
	return out
}
