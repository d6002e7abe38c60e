package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// it, ByIP if the hub runs in a container of this engine and Published
// otherwise. The answer is found once, at the first start the engine answers.
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
		id, err := l.findSelf(ctx)
		switch {
		case err != nil:
			return "", err
		case id != "":
			a, self = ByIP, id
		case a == ByIP:
			return "", errors.New("-container-address ip: the hub runs in no container of this Docker engine (none has the id in /proc/self/mountinfo or the host name); use -container-address published on the host")
		default:
			a = Published
		}
	}
	if a == ByIP && l.userNetwork() {
		// On a shared network the hub must be there too, as Selenoid must.
		err := l.engine.NetworkConnect(ctx, l.opts.Network, self, &network.EndpointSettings{})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return "", fmt.Errorf("joining the hub's container %s to -container-network %q: %w", shortID(self), l.opts.Network, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addr == "" {
		l.addr, l.self = a, self
		if a == ByIP {
			logtag.Event(l.log, slog.LevelInfo, "", "INIT", "the hub runs in container "+shortID(self)+": browsers are reached by their address on the network it shares with them")
		}
	}
	return l.addr, nil
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

// findSelf is the id of the hub's own container if the engine has one of
// the ids selfCandidates finds, or "".
func (l *Launcher) findSelf(ctx context.Context) (string, error) {
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	host, _ := os.Hostname()
	for _, c := range selfCandidates(mountinfo, host) {
		info, err := l.engine.ContainerInspect(ctx, c)
		switch {
		case cerrdefs.IsNotFound(err):
			continue
		case err != nil:
			return "", fmt.Errorf("asking the engine whether the hub runs in container %s: %w", c, err)
		case strings.HasPrefix(info.ID, c): // not a container that is merely named so
			return info.ID, nil
		}
	}
	return "", nil
}

var (
	containerPath = regexp.MustCompile(`/containers/([0-9a-f]{64})/`)
	shortIDName   = regexp.MustCompile(`^[0-9a-f]{12}$`)
)

// selfCandidates are the ids the hub's container may have: the one in the
// paths of the files the engine mounts into each of its containers
// (/etc/hostname, /etc/hosts, /etc/resolv.conf from …/containers/<id>/), and
// the host name when it is a short id, the engine's default host name.
func selfCandidates(mountinfo []byte, hostname string) []string {
	var out []string
	for _, m := range containerPath.FindAllSubmatch(mountinfo, -1) {
		if id := string(m[1]); !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	if shortIDName.MatchString(hostname) && !slices.ContainsFunc(out, func(id string) bool { return strings.HasPrefix(id, hostname) }) {
		out = append(out, hostname)
	}
	return out
}
