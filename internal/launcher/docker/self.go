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
		case !strings.HasPrefix(info.ID, c): // a container merely named so
		case c == host && (info.Config == nil || info.Config.Hostname != host):
			// A machine whose name looks like an id is no container of
			// that id unless the container has that name too.
		default:
			return info.ID, nil
		}
	}
	return "", nil
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
