package docker

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
)

// containerConfig builds the container from the browsers.json entry and the
// client's options. What a client may influence is an explicit allow-list: env,
// labels (never ours), time zone, screen resolution, VNC. Mounts, privileges and
// networks come from the operator's configuration only. side are the image's
// side-service ports to publish with the driver's.
func (l *Launcher) containerConfig(r launcher.Request, session string, side []nat.Port) (*container.Config, *container.HostConfig, error) {
	b, o := r.Browser.Browser, r.Options
	port, err := nat.NewPort("tcp", portOf(b))
	if err != nil {
		return nil, nil, err
	}
	labels := map[string]string{}
	for k, v := range o.Labels {
		if !strings.HasPrefix(k, "websummoner.") {
			labels[k] = v
		}
	}
	if o.Name != "" {
		labels["name"] = o.Name // Selenoid's label: tools that list a grid's containers read it
	}
	maps.Copy(labels, b.Labels)
	labels[LabelInstance] = l.opts.Instance
	labels[LabelHub] = l.hubLabel()
	labels[LabelSession] = session
	labels[LabelBrowser] = r.Browser.String()

	memStr, cpuStr := b.Mem, b.CPU
	if memStr == "" {
		memStr = l.opts.Mem
	}
	if cpuStr == "" {
		cpuStr = l.opts.CPU
	}
	mem, err := config.ParseMem(memStr)
	if err != nil {
		return nil, nil, fmt.Errorf("\"mem\": %v", err)
	}
	cpu, err := config.ParseCPU(cpuStr)
	if err != nil {
		return nil, nil, fmt.Errorf("\"cpu\": %v", err)
	}
	shm := b.ShmSize
	if shm <= 0 {
		// Selenoid's default, not Docker's 64 MiB; a "tmpfs" at /dev/shm
		// still takes its place, as Docker mounts it instead.
		shm = config.ShmSizeDefault
	}
	ports := append([]nat.Port{port}, side...)
	cfg := &container.Config{
		Hostname:     o.ContainerHostname,
		Image:        b.Image.Name,
		Env:          launcher.ContainerEnv(r, l.opts.TimeZone, l.log),
		Labels:       labels,
		ExposedPorts: nat.PortSet{},
	}
	host := &container.HostConfig{
		Binds:           b.Volumes,
		Tmpfs:           b.Tmpfs,
		ShmSize:         shm,
		ExtraHosts:      append(slices.Clone(o.HostsEntries), b.Hosts...), // the client's first, as under Selenoid: the first line for a name wins, in its own container
		DNS:             o.DNSServers,
		Sysctls:         b.Sysctl,
		Privileged:      l.opts.Privileged,
		PublishAllPorts: b.PublishAllPorts,
		Resources:       container.Resources{Memory: mem, NanoCPUs: cpu, PidsLimit: pidsLimit(l.opts.PidsLimit)},
		LogConfig:       logConfig(l.opts.LogConfig, o.Name, o.Labels),
	}
	if !l.opts.Privileged {
		// No raw sockets: a browser needs none, and with them a process in
		// the container could hand frames for another session's address to
		// a neighbour that forwards (the hub's container, on every session's
		// network).
		host.CapDrop = []string{"NET_RAW"}
	}
	if l.mode() == Published {
		host.PortBindings = nat.PortMap{}
	}
	for _, p := range ports {
		cfg.ExposedPorts[p] = struct{}{}
		if l.mode() == Published {
			host.PortBindings[p] = []nat.PortBinding{{HostIP: l.publishedAt().bind, HostPort: ""}}
		}
	}
	if l.userNetwork() {
		host.NetworkMode = container.NetworkMode(l.opts.Network)
	}
	for _, c := range o.ApplicationContainers {
		host.Links = append(host.Links, c+":"+c)
	}
	return cfg, host, nil
}

// DefaultPidsLimit is -container-pids-limit's default: Chromium with 16 tabs,
// each with a worker, runs some 300 processes and threads.
const DefaultPidsLimit = 2048

// pidsLimit is Docker's PidsLimit for a bound: nil (none) for 0.
func pidsLimit(n int64) *int64 {
	if n <= 0 {
		return nil
	}
	return &n
}

func (l *Launcher) userNetwork() bool { return l.opts.Network != "" && l.opts.Network != "default" }

func (l *Launcher) networking() *network.NetworkingConfig {
	if !l.userNetwork() {
		return nil
	}
	return &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{l.opts.Network: {}}}
}

func portOf(b *config.Browser) string {
	if b.Port != "" {
		return b.Port
	}
	return "4444"
}

// LoadLogConfig reads -log-conf: a container log driver and its options, as
// JSON ({"Type": "json-file", "Config": {"max-size": "10m"}}), as Selenoid's
// file holds them.
func LoadLogConfig(path string) (*container.LogConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-log-conf: %v", err)
	}
	var lc container.LogConfig
	if err := json.Unmarshal(data, &lc); err != nil {
		return nil, fmt.Errorf("-log-conf %s: not a log configuration (%v); write {\"Type\": \"json-file\", \"Config\": {\"max-size\": \"10m\"}}", path, err)
	}
	if lc.Type == "" && len(lc.Config) > 0 {
		return nil, fmt.Errorf("-log-conf %s: \"Config\" without \"Type\"; name the log driver, such as \"json-file\"", path)
	}
	return &lc, nil
}

// logConfig is a container's log configuration: -log-conf's, with Selenoid's
// defaults for its "tag" (the session's name) and "labels" (the keys of its
// labels, which is what the option means to Docker's drivers).
func logConfig(base *container.LogConfig, name string, labels map[string]string) container.LogConfig {
	if base == nil {
		return container.LogConfig{}
	}
	lc := container.LogConfig{Type: base.Type, Config: maps.Clone(base.Config)}
	if lc.Config == nil {
		return lc
	}
	if _, ok := lc.Config["tag"]; !ok && name != "" {
		// Docker reads the tag as a Go template: a test's name is text,
		// its braces made parentheses.
		lc.Config["tag"] = strings.NewReplacer("{", "(", "}", ")").Replace(name)
	}
	if _, ok := lc.Config["labels"]; !ok && len(labels) > 0 {
		lc.Config["labels"] = strings.Join(slices.Sorted(maps.Keys(labels)), ",")
	}
	return lc
}
