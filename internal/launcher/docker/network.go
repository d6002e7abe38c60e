package docker

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/websummoner/websummoner/internal/launcher"
)

// Side-service ports of Selenoid's browser image contract, so that aerokube's
// images and ours interchange. A port is published, and its endpoint given to the
// hub, only when the image exposes it.
var sidePorts = []struct {
	port   nat.Port
	scheme string
	set    func(*launcher.Endpoints, *url.URL)
}{
	{"7070/tcp", "http", func(e *launcher.Endpoints, u *url.URL) { e.DevTools = u }},
	{"5900/tcp", "tcp", func(e *launcher.Endpoints, u *url.URL) { e.VNC = u }},
	{"8080/tcp", "http", func(e *launcher.Endpoints, u *url.URL) { e.Files = u }},
	{"9090/tcp", "http", func(e *launcher.Endpoints, u *url.URL) { e.Clipboard = u }},
}

// exposedSidePorts are the contract ports the hub publishes for an image: those
// among its exposed ports, or all of them for an image that exposes none —
// aerokube's images expose only their driver's port (EXPOSE 4444), and
// Selenoid publishes the contract's ports whatever the image says.
func exposedSidePorts(exposed map[string]struct{}) []nat.Port {
	var out []nat.Port
	for _, s := range sidePorts {
		if _, ok := exposed[string(s.port)]; ok {
			out = append(out, s.port)
		}
	}
	if len(out) == 0 {
		for _, s := range sidePorts {
			out = append(out, s.port)
		}
	}
	return out
}

// endpointsOf says where a started container's driver and side services are.
func endpointsOf(addr Address, pub published, info container.InspectResponse, name, netName, port, path string, side []nat.Port) (launcher.Endpoints, error) {
	var e launcher.Endpoints
	host, err := hostPort(addr, pub, info, name, netName, nat.Port(port+"/tcp"))
	if err != nil {
		return e, err
	}
	e.Driver = &url.URL{Scheme: "http", Host: host, Path: path}
	for _, s := range sidePorts {
		for _, p := range side {
			if p != s.port {
				continue
			}
			if host, err := hostPort(addr, pub, info, name, netName, p); err == nil {
				s.set(&e, &url.URL{Scheme: s.scheme, Host: host})
			}
		}
	}
	return e, nil
}

// loopbackPorts are the ports of e on the host's loopback: a container's
// services published there.
func loopbackPorts(e launcher.Endpoints) []uint16 {
	var out []uint16
	for _, u := range []*url.URL{e.Driver, e.DevTools, e.VNC, e.Files, e.Clipboard} {
		if u == nil {
			continue
		}
		ip, err := netip.ParseAddr(u.Hostname())
		port, perr := strconv.ParseUint(u.Port(), 10, 16)
		if err == nil && perr == nil && ip.IsLoopback() {
			out = append(out, uint16(port))
		}
	}
	return out
}

// containerIP is the container's address on network (its own), or on the
// first network it has an address on; "" if none.
func containerIP(info container.InspectResponse, network string) string {
	if info.NetworkSettings == nil {
		return ""
	}
	if n, ok := info.NetworkSettings.Networks[network]; ok && n != nil && n.IPAddress != "" {
		return n.IPAddress
	}
	names := slices.Sorted(maps.Keys(info.NetworkSettings.Networks))
	for _, name := range names {
		if n := info.NetworkSettings.Networks[name]; n != nil && n.IPAddress != "" {
			return n.IPAddress
		}
	}
	return ""
}

// hostPort is where the hub reaches one container port: its port published
// on pub's host, the container's name on the browsers' network, or its
// address on netName, the network the hub shares with it.
func hostPort(addr Address, pub published, info container.InspectResponse, name, netName string, port nat.Port) (string, error) {
	switch addr {
	case ByName:
		return name + ":" + port.Port(), nil
	case ByIP:
		ip := containerIP(info, netName)
		if ip == "" {
			return "", fmt.Errorf("the container has no address on network %q", netName)
		}
		return net.JoinHostPort(ip, port.Port()), nil
	}
	if info.NetworkSettings == nil {
		return "", errors.New("the engine reported no network settings")
	}
	for _, b := range info.NetworkSettings.Ports[port] {
		if b.HostPort != "" && (sameAddr(b.HostIP, pub.bind) || b.HostIP == "" || b.HostIP == "0.0.0.0") {
			return net.JoinHostPort(pub.host, b.HostPort), nil
		}
	}
	return "", fmt.Errorf("port %s is not published on %s", port, pub.bind)
}

// sameAddr reports whether two IP addresses are one, however written
// (the engine reports fd00::5 for a DOCKER_HOST of [FD00:0::5]).
func sameAddr(a, b string) bool {
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	if errX != nil || errY != nil {
		return a == b
	}
	return x.Unmap() == y.Unmap()
}

// published is where containers' ports are published (Published): bound
// to bind on the engine's host, dialled at host.
type published struct{ host, bind string }

// publishedAt is where this launcher's engine publishes ports; a launcher
// not made by New publishes on the loopback, never on every address.
func (l *Launcher) publishedAt() published {
	if l.pub.host == "" {
		return localEngine
	}
	return l.pub
}

// localEngine's ports are on the hub's own loopback.
var localEngine = published{host: "127.0.0.1", bind: "127.0.0.1"}

// publishedOn is where an engine at daemonHost (DOCKER_HOST) publishes
// ports the hub can reach, as Selenoid reaches them: on the engine's own
// address for an engine over TCP, bound to it when it is an IP address and
// to every address of the engine's host when it is a name; on 127.0.0.1
// for a local one (a Unix socket, or "localhost").
func publishedOn(daemonHost string) published {
	u, err := client.ParseHostURL(daemonHost)
	if err != nil || u.Scheme != "tcp" {
		return localEngine
	}
	host, _, err := net.SplitHostPort(u.Host)
	switch {
	case err != nil || host == "" || host == "localhost":
		return localEngine
	case net.ParseIP(host) != nil:
		return published{host: host, bind: host}
	default:
		return published{host: host, bind: "0.0.0.0"}
	}
}
