package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/websummoner/websummoner/internal/logtag"
)

// Isolation between sessions. Without -container-network every session's
// browser gets a bridge network of its own, created before the container and
// removed after it: no other session's container is on it, so a page in one
// browser cannot open a connection to another's driver, DevTools, VNC or
// files — the kernel drops it (Docker isolates bridge networks from each
// other). The hub reaches the browser at its address on that network, or
// through its ports published on 127.0.0.1 (self.go); either way its
// connections arrive from the network's gateway. The recorder shares the
// browser's network namespace, and application containers the operator
// allows are connected to the session's network for its lifetime.
//
// With -container-network every browser is on the operator's network, as
// under Selenoid: sessions share it. There the image's own services must
// accept the hub alone: the launcher tells the container the addresses the
// hub comes from in HubAddressesEnv, and this project's images listen to
// nothing else (chromedriver --allowed-ips, DevTools, VNC and the file
// server). docs/security.md says which to choose.

// HubAddressesEnv is set in every browser container to the comma-separated
// addresses the hub's connections come from; the image's services accept
// connections from these (and the container's own loopback) only.
const HubAddressesEnv = "WEBSUMMONER_HUB_ADDRESSES"

// sessionNetwork is the network of one session's own, or "" on a shared
// -container-network.
func (l *Launcher) sessionNetwork(cname string) string {
	if l.userNetwork() {
		return ""
	}
	return cname
}

// createNetwork makes the session's own bridge network and returns its
// gateway, the address the hub's connections to published ports come from.
func (l *Launcher) createNetwork(ctx context.Context, name, session string) (string, error) {
	cctx, cancel := l.uncancelled(ctx)
	_, err := l.engine.NetworkCreate(cctx, name, network.CreateOptions{
		Driver: "bridge",
		Labels: map[string]string{LabelInstance: l.opts.Instance, LabelHub: l.hubLabel(), LabelSession: session},
	})
	cancel()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // the caller removes it
	}
	if err != nil {
		if strings.Contains(err.Error(), "address pool") {
			return "", fmt.Errorf("creating the session's own network: %w; every session has a network of its own, and Docker's default address pools hold about 30: give the engine more, smaller ones (\"default-address-pools\": [{\"base\": \"10.200.0.0/16\", \"size\": 28}] in /etc/docker/daemon.json) or lower -limit (docs/security.md)", err)
		}
		return "", fmt.Errorf("creating the session's own network: %w", err)
	}
	return l.gatewayOf(ctx, name)
}

// gatewayOf is the gateway address of a network.
func (l *Launcher) gatewayOf(ctx context.Context, name string) (string, error) {
	info, err := l.engine.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		return "", fmt.Errorf("inspecting network %q: %w", name, err)
	}
	for _, c := range info.IPAM.Config {
		if ip := net.ParseIP(c.Gateway); ip != nil && ip.To4() != nil {
			return c.Gateway, nil
		}
	}
	// Older engines give Docker's default bridge no gateway in its IPAM
	// (only a subnet): its gateway is the address of its interface
	// (docker0) on this host, within the subnet.
	if ifname := info.Options["com.docker.network.bridge.name"]; ifname != "" {
		if gw := bridgeAddress(ifname, info.IPAM.Config); gw != "" {
			return gw, nil
		}
	}
	return "", fmt.Errorf("network %q has no IPv4 gateway", name)
}

// bridgeAddress is the IPv4 address that the host interface ifname has in
// one of the subnets; "" for none (an engine on another host).
func bridgeAddress(ifname string, subnets []network.IPAMConfig) string {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return ""
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil {
			continue
		}
		for _, c := range subnets {
			if _, sub, err := net.ParseCIDR(c.Subnet); err == nil && sub.Contains(ipn.IP) {
				return ipn.IP.String()
			}
		}
	}
	return ""
}

// hubAddresses are the addresses the hub's connections to a container on
// network come from: its gateway (published ports, and the engine's proxy),
// and, for a hub that runs in a container itself (-container-address name or
// ip), the hub's own addresses.
func (l *Launcher) hubAddresses(ctx context.Context, netName, gateway string) (string, error) {
	addrs := []string{}
	if gateway == "" && netName != "" {
		gw, err := l.gatewayOf(ctx, netName)
		if err != nil {
			return "", err
		}
		gateway = gw
	}
	if gateway != "" {
		addrs = append(addrs, gateway)
	}
	if from := l.fromHubAddress(); from != "" && !slices.Contains(addrs, from) {
		addrs = append(addrs, from) // a remote engine's port mapping keeps the hub's own address
	}
	if m := l.mode(); m == ByName || m == ByIP {
		ifaces, err := net.InterfaceAddrs()
		if err != nil {
			return "", fmt.Errorf("listing the hub's own addresses: %w", err)
		}
		for _, a := range ifaces {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !slices.Contains(addrs, n.IP.String()) {
				addrs = append(addrs, n.IP.String())
			}
		}
	}
	return strings.Join(addrs, ","), nil
}

// connectApplications connects the application containers a session asked
// for (and the operator allows) to the session's own network, under their
// names, as Selenoid's links made them reachable.
func (l *Launcher) connectApplications(ctx context.Context, netName string, apps []string) error {
	for _, c := range apps {
		err := l.engine.NetworkConnect(ctx, netName, c, &network.EndpointSettings{Aliases: []string{c}})
		if err != nil {
			return fmt.Errorf("connecting applicationContainers %q to the session's network: %w (the container must exist and run)", c, err)
		}
	}
	return nil
}

// removeNetwork disconnects whatever is still on a session's network (the
// application containers) and removes it.
func (l *Launcher) removeNetwork(ctx context.Context, name string) error {
	info, err := l.engine.NetworkInspect(ctx, name, network.InspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspecting the session's network %s: %w", name, err)
	}
	for id := range info.Containers {
		if err := l.engine.NetworkDisconnect(ctx, name, id, true); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("disconnecting %s from the session's network %s: %w", shortID(id), name, err)
		}
	}
	if err := l.engine.NetworkRemove(ctx, name); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing the session's network %s: %w (the sweep retries every -sweep-interval)", name, err)
	}
	return nil
}

// sweepNetworks removes this instance's session networks that no live or
// starting session owns (all: every one, at start-up).
func (l *Launcher) sweepNetworks(ctx context.Context, all bool) int {
	list, err := l.engine.NetworkList(ctx, network.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+l.opts.Instance))})
	if err != nil {
		logtag.Event(l.log, slog.LevelWarn, "", "SWEEP_FAILED", "networks", err)
		return 0
	}
	n := 0
	seen := map[string]bool{}
	for _, nw := range list {
		l.mu.Lock()
		owned := l.creating[nw.Name] || l.networks[nw.Name]
		l.mu.Unlock()
		if owned && !all || l.otherHubRuns(ctx, nw.Labels[LabelHub], seen) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, l.opts.StopTimeout)
		err := l.removeNetwork(rctx, nw.Name)
		cancel()
		if err == nil {
			n++
		} else if !errors.Is(err, context.Canceled) {
			logtag.Event(l.log, slog.LevelWarn, "", "SWEEP_FAILED", nw.Name, err)
		}
	}
	return n
}
