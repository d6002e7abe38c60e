// Package docker runs each session's browser in a Docker container, through the
// Docker Engine API: created from its browsers.json entry, its driver port
// published on 127.0.0.1, labelled with the hub instance, removed when the session
// ends, and swept when nothing owns it.
package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/metrics"
)

// Labels every container of this hub carries.
const (
	LabelInstance = "websummoner.instance" // the hub instance (-instance)
	LabelSession  = "websummoner.session"  // the start it belongs to: request id and a random token
	LabelBrowser  = "websummoner.browser"  // "name version"
)

// Engine is the part of the Docker Engine API the launcher uses; *client.Client
// implements it.
type Engine interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ImageInspect(ctx context.Context, imageID string, inspectOpts ...client.ImageInspectOption) (image.InspectResponse, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	Ping(ctx context.Context) (types.Ping, error)
}

// NewEngine connects to the engine named by DOCKER_HOST (and DOCKER_API_VERSION,
// DOCKER_CERT_PATH, DOCKER_TLS_VERIFY), negotiating the API version.
// The version is negotiated here, once, before the client is shared: the client's
// lazy negotiation on first use races with a concurrent Events stream.
func NewEngine() (*client.Client, error) {
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.NegotiateAPIVersion(ctx)
	return c, nil
}

// Address says how the hub reaches a container's driver.
type Address string

// Ways to reach a driver.
const (
	// Published: the driver port is published on 127.0.0.1 with an engine-chosen
	// host port, and the hub dials that. For a hub running on the host.
	Published Address = "published"
	// ByName: the hub dials the container by name on the browsers' network. For a
	// hub running in a container on -container-network.
	ByName Address = "name"
)

// Options configure the Docker launcher.
type Options struct {
	// StartupTimeout is -service-startup-timeout.
	StartupTimeout time.Duration
	// StopTimeout bounds removing a container (-session-delete-timeout).
	StopTimeout time.Duration
	// Instance names this hub; its containers carry it in LabelInstance.
	Instance string
	// Network is -container-network; empty or "default" is the engine's default.
	Network string
	// Privileged runs browsers privileged (-privileged). Off by default.
	Privileged bool
	// Mem and CPU are hub-wide defaults (-mem, -cpu) for entries without their own.
	Mem, CPU string
	// Address is how the hub reaches drivers; empty means Published.
	Address Address
	// SweepInterval is how often containers with no live session are removed;
	// zero means 30s.
	SweepInterval time.Duration
	// HealthInterval is how often the engine is pinged; zero means 5s.
	HealthInterval time.Duration
	// OnHealth, if set, is told each change of the engine's health (the start
	// gate's second signal).
	OnHealth func(up bool)
}

// Launcher starts browsers in containers.
type Launcher struct {
	opts   Options
	engine Engine
	log    *slog.Logger
	client *http.Client
	up     atomic.Bool
	upErr  atomic.Value // string: why the engine is down

	mu       sync.Mutex
	live     map[string]*instance // container id → instance
	creating map[string]bool      // container names being created

	outcomes *prometheus.CounterVec
}

// New returns a Docker launcher. Run must be called for the health check, the
// event watch and the sweeps.
func New(opts Options, engine Engine, logger *slog.Logger, reg prometheus.Registerer) (*Launcher, error) {
	if opts.Address == "" {
		opts.Address = Published
	}
	if opts.Address != Published && opts.Address != ByName {
		return nil, fmt.Errorf("-container-address must be %q or %q (got %q)", Published, ByName, opts.Address)
	}
	if opts.ByNameWithoutNetwork() {
		return nil, fmt.Errorf("-container-address name needs -container-network: containers are found by name only on a user-defined network")
	}
	if _, err := parseMem(opts.Mem); err != nil {
		return nil, fmt.Errorf("-mem: %v", err)
	}
	if _, err := parseCPU(opts.CPU); err != nil {
		return nil, fmt.Errorf("-cpu: %v", err)
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 30 * time.Second
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = 5 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Launcher{
		opts: opts, engine: engine, log: logger,
		client:   &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second},
		live:     map[string]*instance{},
		creating: map[string]bool{},
	}
	l.upErr.Store("not checked yet")
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "websummoner_docker_up",
		Help: "1 while the Docker Engine answers, 0 while it does not.",
	}, func() float64 {
		if l.up.Load() {
			return 1
		}
		return 0
	})
	if err := metrics.Register(reg, up); err != nil {
		return nil, err
	}
	return l, nil
}

// ByNameWithoutNetwork reports a configuration that cannot work.
func (o Options) ByNameWithoutNetwork() bool {
	return o.Address == ByName && (o.Network == "" || o.Network == "default" || o.Network == "bridge")
}

// Run pings the engine, removes what an earlier run of this instance left, then
// keeps watching container deaths and sweeping until ctx ends.
func (l *Launcher) Run(ctx context.Context) {
	l.checkHealth(ctx)
	if l.up.Load() {
		l.sweep(ctx, true)
	}
	go l.watchEvents(ctx)
	health := time.NewTicker(l.opts.HealthInterval)
	sweep := time.NewTicker(l.opts.SweepInterval)
	defer health.Stop()
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-health.C:
			wasUp := l.up.Load()
			l.checkHealth(ctx)
			if !wasUp && l.up.Load() {
				l.reconcile(ctx)
				l.sweep(ctx, false)
			}
		case <-sweep.C:
			if l.up.Load() {
				l.sweep(ctx, false)
			}
		}
	}
}

// Ready reports whether browsers can be started now.
func (l *Launcher) Ready() (bool, string) {
	if l.up.Load() {
		return true, "Docker engine answers"
	}
	return false, "Docker engine unreachable: " + l.upErr.Load().(string)
}

func (l *Launcher) checkHealth(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := l.engine.Ping(pctx)
	was := l.up.Load()
	if err != nil {
		l.upErr.Store(err.Error())
		l.up.Store(false)
		if was {
			logtag.Event(l.log, slog.LevelWarn, "", "DOCKER_DOWN", err)
		}
		if l.opts.OnHealth != nil {
			l.opts.OnHealth(false)
		}
		return
	}
	l.up.Store(true)
	if !was {
		logtag.Event(l.log, slog.LevelInfo, "", "DOCKER_UP")
	}
	if l.opts.OnHealth != nil {
		l.opts.OnHealth(true)
	}
}

// Check fails fast, before a request takes a slot or queues, when the engine is
// down or the image is missing. The hub never pulls an image by itself.
func (l *Launcher) Check(ctx context.Context, b config.Resolved) error {
	name := b.Name + " " + b.Version
	if !l.up.Load() {
		return &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Engine: true,
			Msg: fmt.Sprintf("the Docker engine is unreachable (%s); new sessions fail until it answers again (check DOCKER_HOST and the daemon)", l.upErr.Load())}
	}
	if _, err := l.engine.ImageInspect(ctx, b.Image.Name); err != nil {
		if errdefs.IsNotFound(err) {
			return &launcher.StartError{Phase: launcher.PhaseImage, Browser: name,
				Msg: fmt.Sprintf("image %q is not on the Docker engine; build it or load it there (docker build / docker load) — the hub never pulls images", b.Image.Name)}
		}
		return &launcher.StartError{Phase: launcher.PhaseImage, Browser: name, Engine: true, Err: err,
			Msg: fmt.Sprintf("cannot inspect image %q: %v", b.Image.Name, err)}
	}
	return nil
}

// Start creates and starts the container and waits until its driver answers.
// Any failure on the way removes the container before returning.
func (l *Launcher) Start(ctx context.Context, r launcher.Request) (launcher.Instance, error) {
	name := r.Browser.Name + " " + r.Browser.Version
	if !l.up.Load() {
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Engine: true,
			Msg: fmt.Sprintf("the Docker engine is unreachable (%s)", l.upErr.Load())}
	}
	token := make([]byte, 6)
	_, _ = rand.Read(token)
	session := r.ID + "-" + hex.EncodeToString(token)
	cname := "websummoner-" + l.opts.Instance + "-" + session
	cfg, host, err := l.containerConfig(r, session)
	if err != nil {
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Msg: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.StartupTimeout)
	defer cancel()

	l.mu.Lock()
	l.creating[cname] = true
	l.mu.Unlock()
	created, err := l.engine.ContainerCreate(ctx, cfg, host, l.networking(), nil, cname)
	if err != nil {
		l.doneCreating(cname)
		return nil, l.startErr(ctx, name, launcher.PhaseStart, "creating the container", err)
	}
	inst := &instance{l: l, id: created.ID, name: cname, exited: make(chan struct{})}
	l.mu.Lock()
	l.live[created.ID] = inst
	delete(l.creating, cname)
	l.mu.Unlock()

	fail := func(phase, what string, err error) (launcher.Instance, error) {
		l.removeNow(inst)
		return nil, l.startErr(ctx, name, phase, what, err)
	}
	if err := l.engine.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return fail(launcher.PhaseStart, "starting the container", err)
	}
	info, err := l.engine.ContainerInspect(ctx, created.ID)
	if err != nil {
		return fail(launcher.PhaseStart, "inspecting the container", err)
	}
	inst.base, err = driverURL(l.opts.Address, info, cname, portOf(r.Browser.Browser), r.Browser.Path)
	if err != nil {
		return fail(launcher.PhaseStart, "finding the driver's address", err)
	}
	err = launcher.WaitReady(ctx, l.client, inst.base, inst.exited)
	switch {
	case err == nil:
		logtag.Event(l.log, slog.LevelDebug, r.ID, "CONTAINER_STARTED", name, shortID(created.ID), inst.base.Host)
		return inst, nil
	case errors.Is(err, launcher.ErrExited):
		return fail(launcher.PhaseStartup, "waiting for the driver", fmt.Errorf("the container exited before its driver answered (%s)", inst.ExitReason()))
	case errors.Is(err, context.DeadlineExceeded):
		l.removeNow(inst)
		return nil, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: name, Engine: true, Err: err,
			Msg: fmt.Sprintf("container %s did not answer on %s within -service-startup-timeout %v; raise it if the host is slow, or check the image", shortID(created.ID), inst.base.Host, l.opts.StartupTimeout)}
	default:
		l.removeNow(inst)
		return nil, err // the client went away
	}
}

func (l *Launcher) doneCreating(cname string) {
	l.mu.Lock()
	delete(l.creating, cname)
	l.mu.Unlock()
}

func (l *Launcher) startErr(ctx context.Context, name, phase, what string, err error) error {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &launcher.StartError{Phase: phase, Browser: name, Engine: true, Err: err,
			Msg: fmt.Sprintf("%s took longer than -service-startup-timeout %v: %v", what, l.opts.StartupTimeout, err)}
	}
	return &launcher.StartError{Phase: phase, Browser: name, Engine: true, Err: err, Msg: fmt.Sprintf("%s: %v", what, err)}
}

// containerConfig builds the container from the browsers.json entry and the
// client's options. What a client may influence is an explicit allow-list: env,
// labels (never ours), time zone, screen resolution, VNC. Mounts, privileges and
// networks come from the operator's configuration only.
func (l *Launcher) containerConfig(r launcher.Request, session string) (*container.Config, *container.HostConfig, error) {
	b, o := r.Browser.Browser, r.Options
	port, err := nat.NewPort("tcp", portOf(b))
	if err != nil {
		return nil, nil, err
	}
	env := append([]string(nil), b.Env...)
	if o.TimeZone != "" {
		env = append(env, "TZ="+o.TimeZone)
	}
	if o.ScreenResolution != "" {
		env = append(env, "SCREEN_RESOLUTION="+o.ScreenResolution)
	}
	if o.EnableVNC {
		env = append(env, "ENABLE_VNC=true")
	}
	env = append(env, o.Env...)
	labels := map[string]string{}
	for k, v := range o.Labels {
		if !strings.HasPrefix(k, "websummoner.") {
			labels[k] = v
		}
	}
	maps.Copy(labels, b.Labels)
	labels[LabelInstance] = l.opts.Instance
	labels[LabelSession] = session
	labels[LabelBrowser] = r.Browser.Name + " " + r.Browser.Version

	memStr, cpuStr := b.Mem, b.CPU
	if memStr == "" {
		memStr = l.opts.Mem
	}
	if cpuStr == "" {
		cpuStr = l.opts.CPU
	}
	mem, err := parseMem(memStr)
	if err != nil {
		return nil, nil, fmt.Errorf("\"mem\": %v", err)
	}
	cpu, err := parseCPU(cpuStr)
	if err != nil {
		return nil, nil, fmt.Errorf("\"cpu\": %v", err)
	}
	cfg := &container.Config{
		Image:        b.Image.Name,
		Env:          env,
		Labels:       labels,
		ExposedPorts: nat.PortSet{port: struct{}{}},
	}
	host := &container.HostConfig{
		Binds:           b.Volumes,
		Tmpfs:           b.Tmpfs,
		ShmSize:         b.ShmSize,
		ExtraHosts:      b.Hosts,
		Sysctls:         b.Sysctl,
		Privileged:      l.opts.Privileged,
		PublishAllPorts: b.PublishAllPorts,
		Resources:       container.Resources{Memory: mem, NanoCPUs: cpu},
	}
	if l.opts.Network != "" && l.opts.Network != "default" {
		host.NetworkMode = container.NetworkMode(l.opts.Network)
	}
	if l.opts.Address == Published {
		host.PortBindings = nat.PortMap{port: []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: ""}}}
	}
	return cfg, host, nil
}

func (l *Launcher) networking() *network.NetworkingConfig {
	if l.opts.Network == "" || l.opts.Network == "default" {
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

// driverURL is where the hub reaches a started container's driver: its published
// port on 127.0.0.1, or its name on the browsers' network.
func driverURL(addr Address, info container.InspectResponse, name, port, path string) (*url.URL, error) {
	if addr == ByName {
		return &url.URL{Scheme: "http", Host: name + ":" + port, Path: path}, nil
	}
	if info.NetworkSettings == nil {
		return nil, errors.New("the engine reported no network settings")
	}
	for _, b := range info.NetworkSettings.Ports[nat.Port(port+"/tcp")] {
		if b.HostPort != "" && (b.HostIP == "127.0.0.1" || b.HostIP == "") {
			return &url.URL{Scheme: "http", Host: "127.0.0.1:" + b.HostPort, Path: path}, nil
		}
	}
	return nil, fmt.Errorf("port %s/tcp is not published on 127.0.0.1", port)
}

// removeNow removes a container whatever its state, bounded by the stop timeout.
// A removal that fails (engine down) is left to the sweep: the container is no
// longer live, so the next sweep takes it.
func (l *Launcher) removeNow(inst *instance) {
	// The container stays owned until it is gone, so a sweep never races this
	// removal with its own.
	defer func() {
		l.mu.Lock()
		delete(l.live, inst.id)
		l.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.StopTimeout)
	defer cancel()
	err := l.engine.ContainerRemove(ctx, inst.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !errdefs.IsNotFound(err) {
		logtag.Event(l.log, slog.LevelWarn, "", "CONTAINER_REMOVE_FAILED", shortID(inst.id), err, "the sweep will retry")
	}
}

// sweep removes containers of this instance that no live session owns. At
// start-up (all) every container of the instance goes: they are a previous
// run's. Otherwise a container is spared while it is being created.
func (l *Launcher) sweep(ctx context.Context, all bool) int {
	list, err := l.engine.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+l.opts.Instance))})
	if err != nil {
		logtag.Event(l.log, slog.LevelWarn, "", "SWEEP_FAILED", err)
		return 0
	}
	n := 0
	for _, c := range list {
		l.mu.Lock()
		owned := l.live[c.ID] != nil
		for _, cn := range c.Names {
			owned = owned || l.creating[strings.TrimPrefix(cn, "/")]
		}
		l.mu.Unlock()
		if owned && !all {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, l.opts.StopTimeout)
		err := l.engine.ContainerRemove(rctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		if err == nil || errdefs.IsNotFound(err) {
			n++
		}
	}
	if n > 0 {
		why := "no live session owns them"
		if all {
			why = "left by an earlier run of instance " + l.opts.Instance
		}
		logtag.Event(l.log, slog.LevelInfo, "", "CONTAINERS_REMOVED", strconv.Itoa(n), why)
	}
	return n
}

// SweepAll removes every container of this instance (start-up and shutdown).
func (l *Launcher) SweepAll(ctx context.Context) int { return l.sweep(ctx, true) }

// Sweep removes containers of this instance that no live session owns.
func (l *Launcher) Sweep(ctx context.Context) int { return l.sweep(ctx, false) }

// watchEvents turns container deaths into Exited, resubscribing when the engine
// connection breaks.
func (l *Launcher) watchEvents(ctx context.Context) {
	for ctx.Err() == nil {
		msgs, errs := l.engine.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("event", string(events.ActionDie)),
			filters.Arg("label", LabelInstance+"="+l.opts.Instance))})
		l.reconcile(ctx) // deaths missed while not subscribed
	recv:
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-msgs:
				l.mu.Lock()
				inst := l.live[m.Actor.ID]
				l.mu.Unlock()
				if inst != nil {
					reason := fmt.Sprintf("container %s exited with code %s", shortID(m.Actor.ID), m.Actor.Attributes["exitCode"])
					ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
					if info, err := l.engine.ContainerInspect(ictx, m.Actor.ID); err == nil && info.State != nil && info.State.OOMKilled {
						reason += " (killed: out of memory)"
					}
					cancel()
					inst.exit(reason)
				}
			case <-errs:
				break recv
			}
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reconcile inspects every live container and reports those that are gone or
// no longer running.
func (l *Launcher) reconcile(ctx context.Context) {
	l.mu.Lock()
	insts := make([]*instance, 0, len(l.live))
	for _, i := range l.live {
		if i.base != nil { // started; one still starting is watched by its Start
			insts = append(insts, i)
		}
	}
	l.mu.Unlock()
	for _, i := range insts {
		info, err := l.engine.ContainerInspect(ctx, i.id)
		switch {
		case errdefs.IsNotFound(err):
			i.exit(fmt.Sprintf("container %s is gone", shortID(i.id)))
		case err == nil && info.State != nil && !info.State.Running:
			reason := fmt.Sprintf("container %s exited with code %d", shortID(i.id), info.State.ExitCode)
			if info.State.OOMKilled {
				reason += " (killed: out of memory)"
			}
			i.exit(reason)
		}
	}
}

type instance struct {
	l      *Launcher
	id     string
	name   string
	base   *url.URL
	exited chan struct{}
	once   sync.Once
	mu     sync.Mutex
	reason string
	stop   sync.Once
}

func (i *instance) exit(reason string) {
	i.once.Do(func() {
		i.mu.Lock()
		i.reason = reason
		i.mu.Unlock()
		close(i.exited)
	})
}

func (i *instance) URL() *url.URL           { return i.base }
func (i *instance) Exited() <-chan struct{} { return i.exited }
func (i *instance) Describe() string        { return shortID(i.id) }
func (i *instance) ExitReason() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.reason == "" {
		return "container running"
	}
	return i.reason
}

// Stop removes the container.
func (i *instance) Stop(context.Context) error {
	i.stop.Do(func() { i.l.removeNow(i) })
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// parseMem reads Selenoid's memory sizes: 128m, 1g, 512k, or bytes.
func parseMem(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	switch strings.ToLower(s[len(s)-1:]) {
	case "k":
		mult = 1 << 10
	case "m":
		mult = 1 << 20
	case "g":
		mult = 1 << 30
	}
	num := s
	if mult > 1 {
		num = s[:len(s)-1]
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a memory size such as 512m or 1g", s)
	}
	return int64(n * float64(mult)), nil
}

// parseCPU reads a CPU count such as 0.5 or 2.0 into Docker's NanoCPUs.
func parseCPU(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a CPU count such as 0.5 or 2.0", s)
	}
	return int64(n * 1e9), nil
}
