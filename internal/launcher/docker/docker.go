// Package docker runs each session's browser in a Docker container, through the
// Docker Engine API: created from its browsers.json entry, its driver (and
// the side services of Selenoid's image contract) reached at its address on
// the session's own network, or through ports published on 127.0.0.1 (on
// the engine's address, for an engine over TCP) where that address is not
// the host's to reach (self.go), labelled with the hub instance, removed
// when the session ends, and swept when nothing owns it.
//
// The package is split as Nomad's docker driver is: this file starts
// containers; config.go builds a container from its entry; network.go finds its
// endpoints; handle.go is the running container; watch.go follows the engine's
// health and container deaths; reconcile_dangling.go removes and sweeps.
package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/egress"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
)

// Labels every container of this hub carries.
const (
	LabelInstance = "websummoner.instance" // the hub instance (-instance)
	LabelSession  = "websummoner.session"  // the start it belongs to: request id and a random token
	LabelBrowser  = "websummoner.browser"  // "name version"
)

// Address says how the hub reaches a container's driver.
type Address string

// Ways to reach a driver.
const (
	// Published: the driver port is published on 127.0.0.1 with an engine-chosen
	// host port, and the hub dials that. For a hub on the host whose engine's
	// bridges are not the host's (rootless, a VM), or on -container-network. An
	// engine over TCP (DOCKER_HOST=tcp://…) publishes on its own address.
	Published Address = "published"
	// ByName: the hub dials the container by name on the browsers' network. For a
	// hub running in a container on -container-network.
	ByName Address = "name"
	// ByIP: the hub dials the container's address on its network. For a hub
	// running in a container of the same engine, as Selenoid's is run: the
	// hub's container joins each session's own network for the session's
	// life (with -container-network, that network, once). A hub on the
	// host's network joins none: it reaches containers' addresses as is.
	ByIP Address = "ip"
)

// Options configure the Docker launcher. The zero value works: a network
// per session, containers unprivileged, drivers reached as self.go finds.
type Options struct {
	// Options is the start policy shared with the process launcher; zero fields
	// take its defaults.
	launcher.Options
	// Network is -container-network; empty or "default" is the engine's default.
	Network string
	// Privileged runs browsers privileged (-privileged). Off by default.
	Privileged bool
	// Mem and CPU are hub-wide defaults (-mem, -cpu) for entries without their own.
	Mem, CPU string
	// PidsLimit bounds the processes and threads of each browser container
	// (-container-pids-limit): a fork bomb in one session would otherwise
	// take the host's whole PID space, and no other session, nor the hub,
	// could start a thread. 0: none.
	PidsLimit int64
	// Address is how the hub reaches drivers. Empty: ByIP when the hub runs
	// in a container of this engine, or on the host of a local engine whose
	// bridges are the host's without Network; Published otherwise. Found
	// out at the first start.
	Address Address
	// Published records the ports containers publish on the host's loopback
	// while they live, for sandboxed local browsers' proxies to refuse
	// (egress.Guard.Ports). Nil: not recorded.
	Published *egress.PortSet
	// SweepInterval is how often containers with no live session are removed;
	// zero means 30s.
	SweepInterval time.Duration
	// HealthInterval is how often the engine is pinged; zero means 5s.
	HealthInterval time.Duration
	// VideoDir is -video-output-dir, where finished recordings are written; with
	// VideoImage (-video-recorder-image) it enables enableVideo. Empty: sessions
	// asking for video are refused.
	VideoDir   string
	VideoImage string
	// VideoMaxSize is -video-max-size: the bytes at which a recording ends
	// (launcher.RecorderEnv), and, with room for its index, the most of one
	// that is kept (launcher.VideoReadBound). Zero: no bound.
	VideoMaxSize int64
	// LogConfig is -log-conf: every browser container's log driver and its
	// options, as Selenoid applies them ("tag" defaults to the session's
	// name, "labels" to its labels). Nil: the engine's default driver. Live
	// and kept logs read the container's output through the engine, so they
	// need a driver the engine can read back (json-file, local, journald).
	LogConfig *container.LogConfig
	// OnHealth, if set, is told each change of the engine's health (the start
	// gate's second signal).
	OnHealth func(up bool)
}

// Validate says which flag holds a value the launcher cannot work with.
func (o Options) Validate() error {
	if err := o.Options.Validate(); err != nil {
		return err
	}
	switch {
	case o.Address != "" && o.Address != Published && o.Address != ByName && o.Address != ByIP:
		return fmt.Errorf("-container-address must be %q, %q or %q, or empty to choose by where the hub runs (got %q)", Published, ByName, ByIP, o.Address)
	case o.Address == ByName && (o.Network == "" || o.Network == "default" || o.Network == "bridge"):
		return errors.New("-container-address name needs -container-network: containers are found by name only on a user-defined network")
	case o.SweepInterval < 0:
		return fmt.Errorf("-sweep-interval must be a positive duration such as 30s (got %v)", o.SweepInterval)
	case o.PidsLimit < 0:
		return fmt.Errorf("-container-pids-limit must be 0 (no limit) or more (got %d)", o.PidsLimit)
	}
	if _, err := config.ParseMem(o.Mem); err != nil {
		return fmt.Errorf("-mem: %v", err)
	}
	if _, err := config.ParseCPU(o.CPU); err != nil {
		return fmt.Errorf("-cpu: %v", err)
	}
	return nil
}

// Launcher starts browsers in containers.
type Launcher struct {
	opts   Options
	engine Engine
	log    *slog.Logger
	client *http.Client
	health *launcher.Health

	mu        sync.Mutex
	live      map[string]*instance // container id → instance
	recorders map[string]*instance // recorder container id → its browser's instance
	creating  map[string]bool      // container names being created
	networks  map[string]bool      // sessions' own networks, while their container lives
	// dangling are containers whose removal failed (engine down, a removal
	// already under way), with the loopback ports they published: the sweep
	// gives the ports back once the container is gone.
	dangling map[string][]uint16
	addr     Address   // how drivers are reached, once known (address)
	self     string    // the hub's own container with ByIP, if it joins networks
	hub      string    // this hub's LabelHub value, once known (hubID)
	pub      published // where Published ports are, by the engine's DOCKER_HOST
	fromHub  string    // the hub's address toward a remote engine (address)
}

// New returns a Docker launcher. Run must be called for the health check, the
// event watch and the sweeps.
func New(opts Options, engine Engine, logger *slog.Logger, reg prometheus.Registerer) (*Launcher, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Options = opts.Options.WithDefaults()
	if opts.SweepInterval == 0 {
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
		client:    opts.ReadyClient(),
		live:      map[string]*instance{},
		recorders: map[string]*instance{},
		creating:  map[string]bool{},
		networks:  map[string]bool{},
		dangling:  map[string][]uint16{},
	}
	if d, ok := engine.(interface{ DaemonHost() string }); ok {
		l.pub = publishedOn(d.DaemonHost())
	}
	var err error
	l.health, err = launcher.NewHealth(launcher.HealthOptions{Engine: "Docker engine", Tag: "DOCKER", Metric: "websummoner_docker_up",
		Advice: "check DOCKER_HOST and the daemon", OnHealth: opts.OnHealth}, logger, reg)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Check fails fast, before a request takes a slot or queues, when the engine is
// down or the image is missing. The hub never pulls an image by itself.
func (l *Launcher) Check(ctx context.Context, b config.Resolved) error {
	if !l.health.Up() {
		return l.health.DownErr(b, nil)
	}
	if _, err := l.inspectImage(ctx, b); err != nil {
		return err
	}
	if l.userNetwork() {
		// Every start on a network that is not there fails: said before one
		// is tried, and not as a browser that failed to start.
		_, err := l.engine.NetworkInspect(ctx, l.opts.Network, network.InspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return &launcher.StartError{Phase: launcher.PhaseImage, Browser: b.String(),
				Msg: fmt.Sprintf("-container-network %q is not a network of the Docker engine: create it (docker network create %s) or give the hub another", l.opts.Network, l.opts.Network)}
		}
	}
	return nil
}

func (l *Launcher) inspectImage(ctx context.Context, b config.Resolved) ([]nat.Port, error) {
	img, err := l.engine.ImageInspect(ctx, b.Image.Name)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, &launcher.StartError{Phase: launcher.PhaseImage, Browser: b.String(),
			Msg: fmt.Sprintf("image %q is not on the Docker engine; build it or load it there (docker build / docker load) — the hub never pulls images", b.Image.Name)}
	case client.IsErrConnectionFailed(err):
		return nil, l.health.DownErr(b, err)
	case err != nil:
		return nil, &launcher.StartError{Phase: launcher.PhaseImage, Browser: b.String(), Engine: true, Err: err,
			Msg: fmt.Sprintf("cannot inspect image %q: %v", b.Image.Name, err)}
	}
	if img.Config == nil {
		return nil, nil
	}
	return exposedSidePorts(img.Config.ExposedPorts), nil
}

// Start creates and starts the container and waits until its driver answers.
// Any failure on the way removes the container before returning.
func (l *Launcher) Start(ctx context.Context, r launcher.Request) (launcher.Instance, error) {
	if !l.health.Up() {
		return nil, l.health.DownErr(r.Browser, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.StartupTimeout)
	defer cancel()
	if _, err := l.address(ctx); err != nil {
		return nil, l.startErr(ctx, r.Browser, launcher.PhaseStart, "finding how to reach containers", err)
	}
	if _, err := l.hubID(ctx); err != nil {
		return nil, l.startErr(ctx, r.Browser, launcher.PhaseStart, "finding whether the hub runs in a container", err)
	}
	side, err := l.inspectImage(ctx, r.Browser)
	if err != nil {
		return nil, err
	}
	if err := l.checkRecorder(ctx, r); err != nil {
		return nil, err
	}
	token := make([]byte, 6)
	_, _ = rand.Read(token)
	session := r.ID + "-" + hex.EncodeToString(token)
	cname := "websummoner-" + l.opts.Instance + "-" + session
	// Marked first: the sweep spares a network and a container by this name
	// while they are being made.
	l.mu.Lock()
	l.creating[cname] = true
	l.mu.Unlock()
	created, netName, err := l.create(ctx, r, cname, session, side)
	var inst *instance
	l.mu.Lock()
	delete(l.creating, cname)
	if err == nil {
		inst = &instance{l: l, id: created.ID, name: cname, network: netName, exited: make(chan struct{}), opts: r.Options, requestID: r.ID}
		l.live[created.ID] = inst
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}

	endpoints, err := l.run(ctx, inst, r, session, side)
	if err != nil {
		// Removed even when the client left: the context for that is not the client's.
		_ = l.removeNow(context.WithoutCancel(ctx), inst)
		return nil, err
	}
	endpoints.Log = inst
	l.mu.Lock()
	inst.endpoints = endpoints
	l.mu.Unlock()
	logtag.Event(l.log, slog.LevelDebug, r.ID, "CONTAINER_STARTED", r.Browser, shortID(created.ID), endpoints.Driver.Host)
	return inst, nil
}

// uncancelled is ctx for a call that makes something on the engine: a
// cancelled call may still make it there after the hub gave up on it, out of
// the hub's sight until the next sweep, so the call runs to its answer
// (within the start's own deadline) and the caller undoes it.
func (l *Launcher) uncancelled(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		// The start's own deadline still holds: a hung engine keeps the
		// slot no longer than it would have.
		return context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), l.opts.StartupTimeout)
}

// create makes the session's own network (without -container-network) and
// the container on it, with the addresses the hub comes from in its
// environment. On failure nothing it made is left.
func (l *Launcher) create(ctx context.Context, r launcher.Request, cname, session string, side []nat.Port) (container.CreateResponse, string, error) {
	var none container.CreateResponse
	netName, gateway := l.sessionNetwork(cname), ""
	shared := l.opts.Network
	if netName != "" {
		gw, err := l.createNetwork(ctx, netName, session)
		if err != nil {
			_ = l.dropNetwork(context.WithoutCancel(ctx), netName)
			return none, "", l.startErr(ctx, r.Browser, launcher.PhaseStart, "isolating the session", err)
		}
		l.mu.Lock()
		l.networks[netName] = true
		l.mu.Unlock()
		gateway, shared = gw, ""
		if self := l.selfContainer(); self != "" {
			// Before the hub's addresses are listed: its address on the
			// session's network is one the container must accept.
			if err := l.engine.NetworkConnect(ctx, netName, self, &network.EndpointSettings{}); err != nil {
				_ = l.dropNetwork(context.WithoutCancel(ctx), netName)
				return none, "", l.startErr(ctx, r.Browser, launcher.PhaseStart, "joining the hub's container to the session's network", err)
			}
		}
	}
	fail := func(what string, err error) (container.CreateResponse, string, error) {
		_ = l.dropNetwork(context.WithoutCancel(ctx), netName)
		return none, "", l.startErr(ctx, r.Browser, launcher.PhaseStart, what, err)
	}
	hub, err := l.hubAddresses(ctx, shared, gateway)
	if err != nil {
		return fail("finding the hub's addresses", err)
	}
	cfg, host, err := l.containerConfig(r, session, side)
	if err != nil {
		_ = l.dropNetwork(context.WithoutCancel(ctx), netName)
		return none, "", &launcher.StartError{Phase: launcher.PhaseStart, Browser: r.Browser.String(), Msg: err.Error()}
	}
	cfg.Env = append(cfg.Env, HubAddressesEnv+"="+hub)
	netCfg := l.networking()
	if netName != "" {
		host.NetworkMode = container.NetworkMode(netName)
		host.Links = nil // application containers join the session's network instead
		netCfg = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {}}}
	}
	if err := ctx.Err(); err != nil {
		return fail("creating the container", err)
	}
	cctx, cancel := l.uncancelled(ctx)
	created, err := l.engine.ContainerCreate(cctx, cfg, host, netCfg, nil, cname)
	cancel()
	if err == nil && ctx.Err() != nil {
		// The client left while the engine created it: removed now, not at
		// the next sweep.
		rctx, cancel := l.uncancelled(ctx)
		_ = l.engine.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		err = ctx.Err()
	}
	if err != nil {
		return fail("creating the container", err)
	}
	if netName != "" {
		if err := l.connectApplications(ctx, netName, r.Options.ApplicationContainers); err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.StopTimeout)
			_ = l.engine.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
			_ = l.dropNetwork(context.WithoutCancel(ctx), netName)
			return none, "", &launcher.StartError{Phase: launcher.PhaseStart, Browser: r.Browser.String(), Err: err, Msg: err.Error()}
		}
	}
	return created, netName, nil
}

// run starts a created container and waits until its driver answers.
func (l *Launcher) run(ctx context.Context, inst *instance, r launcher.Request, session string, side []nat.Port) (launcher.Endpoints, error) {
	var e launcher.Endpoints
	for _, n := range r.Options.AdditionalNetworks {
		if err := l.engine.NetworkConnect(ctx, n, inst.id, &network.EndpointSettings{}); err != nil {
			return e, &launcher.StartError{Phase: launcher.PhaseStart, Browser: r.Browser.String(), Err: err,
				Msg: fmt.Sprintf("joining additionalNetworks %q: %v (the network must exist on the engine)", n, err)}
		}
	}
	if err := l.engine.ContainerStart(ctx, inst.id, container.StartOptions{}); err != nil {
		return e, l.startErr(ctx, r.Browser, launcher.PhaseStart, "starting the container", err)
	}
	if r.Options.EnableVideo {
		if err := l.startRecorder(ctx, inst, r, session); err != nil {
			return e, err
		}
	}
	info, err := l.engine.ContainerInspect(ctx, inst.id)
	if err != nil {
		return e, l.startErr(ctx, r.Browser, launcher.PhaseStart, "inspecting the container", err)
	}
	inst.ip = containerIP(info, inst.network)
	netName := inst.network
	if netName == "" {
		netName = l.opts.Network
	}
	e, err = endpointsOf(l.mode(), l.publishedAt(), info, inst.name, netName, portOf(r.Browser.Browser), r.Browser.Path, side)
	if err != nil {
		return e, l.startErr(ctx, r.Browser, launcher.PhaseStart, "finding the driver's address", err)
	}
	// The container's services take a connection from the host's loopback
	// as one from the hub: a sandboxed browser's proxy must not make one.
	inst.published = loopbackPorts(e)
	l.opts.Published.Add(inst.published...)
	err = launcher.WaitReady(ctx, l.client, e.Driver, inst.exited)
	switch {
	case err == nil:
		return e, nil
	case errors.Is(err, launcher.ErrExited):
		return e, l.startErr(ctx, r.Browser, launcher.PhaseStartup, "waiting for the driver", fmt.Errorf("the container exited before its driver answered (%s)", inst.ExitReason()))
	case errors.Is(err, context.DeadlineExceeded):
		return e, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: r.Browser.String(), Engine: true, Err: err,
			Msg: fmt.Sprintf("container %s did not answer on %s within -service-startup-timeout %v; raise it if the host is slow, or check the image", shortID(inst.id), e.Driver.Host, l.opts.StartupTimeout)}
	default:
		return e, err // the client went away
	}
}

// startErr says what failed in which phase: the client leaving (returned as
// is), the start-up budget running out, the engine not answering, or the
// engine refusing.
func (l *Launcher) startErr(ctx context.Context, b config.Resolved, phase, what string, err error) error {
	switch {
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ctx.Err()
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && !l.health.Up():
		// The engine stopped answering under this start: the client is
		// told to try again later, or elsewhere.
		return l.health.DownErr(b, nil) // the health check's reason: this start met only its deadline
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &launcher.StartError{Phase: phase, Browser: b.String(), Engine: true, Err: err,
			Msg: fmt.Sprintf("%s took longer than -service-startup-timeout %v: %v", what, l.opts.StartupTimeout, err)}
	case client.IsErrConnectionFailed(err):
		return l.health.DownErr(b, err)
	}
	return &launcher.StartError{Phase: phase, Browser: b.String(), Engine: true, Err: err, Msg: fmt.Sprintf("%s: %v", what, err)}
}
