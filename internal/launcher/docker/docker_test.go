package docker

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/egress"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/launcher/launchertest"
	"github.com/websummoner/websummoner/internal/logtest"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// These tests run on the machine's real Docker Engine with the repository's stub
// WebDriver image (FROM scratch), built once by images/wdstub/build.sh.
var (
	stubImage string
	engine    *client.Client
	noEngine  string // why the tests skip, outside CI
)

func TestMain(m *testing.M) {
	// Every plain HTTP call of these tests (http.Get) is bounded, so that a
	// driver that hangs fails its test instead of holding the suite.
	http.DefaultClient.Timeout = time.Minute
	var err error
	engine, err = NewEngine()
	if err == nil {
		_, err = engine.Ping(context.Background())
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Println("docker tests: the Docker engine is required in CI:", err)
			os.Exit(1)
		}
		// Not exit 0 before m.Run: that reports "ok" with no test run. Each test
		// skips, visibly, naming why.
		noEngine = fmt.Sprint("no Docker engine: ", err)
		os.Exit(m.Run())
	}
	out, err := exec.Command("../../../images/wdstub/build.sh").Output()
	if err != nil {
		fmt.Println("building the stub image:", err)
		os.Exit(1)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	stubImage = lines[len(lines)-1]
	os.Exit(m.Run())
}

// instanceName is the test's launcher instance: its name and this run's, so
// that two runs at once on one machine (one engine) never sweep each other's
// containers.
func instanceName(t *testing.T) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())) + "-" + runID
}

// runID is this run's: the process id tells runs in one pid namespace apart,
// the random part runs in two that share the engine.
var runID = func() string {
	b := make([]byte, 2)
	rand.Read(b)
	return fmt.Sprintf("%d-%x", os.Getpid(), b)
}()

func needEngine(t *testing.T) {
	t.Helper()
	if noEngine != "" {
		t.Skip(noEngine)
	}
}

func newLauncher(t *testing.T, opts Options, eng Engine) (*Launcher, logtest.Lines) {
	t.Helper()
	needEngine(t)
	if opts.StartupTimeout == 0 {
		opts.StartupTimeout = time.Minute // a bound for a hang: a busy engine starts containers slowly
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 10 * time.Second
	}
	if opts.Instance == "" {
		opts.Instance = instanceName(t)
	}
	if eng == nil {
		eng = engine
	}
	ev, log := logtest.New(1000)
	l, err := New(opts, eng, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.checkHealth(ctx)
	go l.watchEvents(ctx)
	t.Cleanup(func() {
		cancel()
		l.SweepAll(context.Background())
		if n := len(containersOf(t, opts.Instance)); n != 0 {
			t.Errorf("%d containers left for instance %s", n, opts.Instance)
		}
	})
	return l, ev
}

func containersOf(t *testing.T, instance string) []container.Summary {
	t.Helper()
	list, err := engine.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+instance))})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func stubRequest(env ...string) launcher.Request {
	return launcher.Request{ID: "7", Browser: config.Resolved{Name: "stub", Version: "1", Browser: &config.Browser{
		Image: config.Image{Name: stubImage}, Port: "4444", Path: "/", Env: env}}}
}

// On a local engine whose bridges are the host's, the hub reaches each
// browser by its address on its session's own network, and nothing of the
// session's is on the host's loopback, where any process of the host (a
// sandboxed browser of another hub among them) could reach a published
// port; with -container-address published, the ports are on 127.0.0.1,
// refused to this hub's sandboxed browsers while the container lives.
func TestStartServeStop(t *testing.T) {
	for _, c := range []struct {
		name      string
		addr      Address
		published bool
	}{{"default", "", false}, {"published", Published, true}} {
		t.Run(c.name, func(t *testing.T) { startServeStop(t, c.addr, c.published) })
	}
}

func startServeStop(t *testing.T, addr Address, published bool) {
	ports := &egress.PortSet{}
	l, _ := newLauncher(t, Options{Published: ports, Address: addr, PidsLimit: 2048}, nil)
	if addr == "" && !l.bridgesOnHost(context.Background()) {
		published = true // a rootless engine, or one in a VM: its bridges are not this host's
	}
	inst, err := l.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	host, _ := netip.ParseAddr(inst.Endpoints().Driver.Hostname())
	if host.IsLoopback() != published {
		t.Fatalf("driver reached at %s, with -container-address %q", inst.Endpoints().Driver, addr)
	}
	resp, err := http.Get(inst.Endpoints().Driver.JoinPath("status").String())
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("driver: %v %v", err, resp)
	}
	resp.Body.Close()
	// Its published ports are refused to sandboxed browsers while it lives.
	driverPort, _ := strconv.ParseUint(inst.Endpoints().Driver.Port(), 10, 16)
	if published && !ports.Holds(uint16(driverPort)) {
		t.Errorf("the driver's port %d on the host's loopback is not refused to sandboxed browsers", driverPort)
	}
	id := inst.(*instance).id
	info, err := engine.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if info.HostConfig.Privileged {
		t.Error("privileged by default")
	}
	if p := info.HostConfig.PidsLimit; p == nil || *p != 2048 {
		t.Errorf("PidsLimit %v, want the 2048 given", p)
	}
	if !slices.Contains(info.HostConfig.CapDrop, "NET_RAW") && !slices.Contains(info.HostConfig.CapDrop, "CAP_NET_RAW") {
		t.Errorf("raw sockets not dropped: CapDrop %v", info.HostConfig.CapDrop)
	}
	if !published && (len(info.HostConfig.PortBindings) > 0 || info.HostConfig.PublishAllPorts) {
		t.Errorf("ports published on the host: %v", info.HostConfig.PortBindings)
	}
	for _, b := range info.HostConfig.PortBindings[nat.Port("4444/tcp")] {
		if b.HostIP != "127.0.0.1" {
			t.Errorf("port published on %q", b.HostIP)
		}
	}
	if info.Config.Labels[LabelInstance] != l.opts.Instance || !strings.HasPrefix(info.Config.Labels[LabelSession], "7-") || info.Config.Labels[LabelBrowser] != "stub 1" {
		t.Errorf("labels %v", info.Config.Labels)
	}
	// /status's containerInfo: the full id and the address on its network.
	cid, ip := inst.(launcher.Container).ContainerInfo()
	if cid != id || ip == "" || ip != containerIP(info, inst.(*instance).network) {
		t.Errorf("ContainerInfo %q %q; want %q and its address", cid, ip, id)
	}
	inst.Stop(context.Background())
	if _, err := engine.ContainerInspect(context.Background(), id); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container still there after Stop: %v", err)
	}
	if published && ports.Holds(uint16(driverPort)) {
		t.Errorf("port %d still refused after its container is gone", driverPort)
	}
}

func TestMissingImageFailsAtOnce(t *testing.T) {
	l, _ := newLauncher(t, Options{}, nil)
	r := stubRequest()
	r.Browser.Image.Name = "websummoner/no-such-image:1"
	err := l.Check(context.Background(), r.Browser)
	var se *launcher.StartError
	if !errors.As(err, &se) || se.Phase != launcher.PhaseImage || !strings.Contains(err.Error(), `"websummoner/no-such-image:1" is not on the Docker engine`) || !strings.Contains(err.Error(), "never pulls") {
		t.Fatalf("err = %v", err)
	}
	if err := l.Check(context.Background(), stubRequest().Browser); err != nil {
		t.Fatalf("present image: %v", err)
	}
	// A -container-network the engine does not have fails every start: said
	// at once, naming the flag.
	l, _ = newLauncher(t, Options{Network: "websummoner-no-such-network"}, nil)
	err = l.Check(context.Background(), stubRequest().Browser)
	if !errors.As(err, &se) || !strings.Contains(err.Error(), `-container-network "websummoner-no-such-network" is not a network`) {
		t.Fatalf("missing network: %v", err)
	}
}

func TestStartupTimeoutRemovesContainer(t *testing.T) {
	// Long enough for a busy machine's engine to create and start the
	// container, so the budget runs out where the test means it to: waiting
	// for the driver, which never listens.
	l, _ := newLauncher(t, Options{Options: launcher.Options{StartupTimeout: 30 * time.Second}}, nil)
	_, err := l.Start(context.Background(), stubRequest("WDSTUB_LISTEN_DELAY=1h"))
	var se *launcher.StartError
	if !errors.As(err, &se) || se.Phase != launcher.PhaseStartup || !strings.Contains(err.Error(), "within -service-startup-timeout 30s") {
		t.Fatalf("err = %v", err)
	}
	if n := len(containersOf(t, l.opts.Instance)); n != 0 {
		t.Fatalf("%d containers left after a failed start", n)
	}
}

func TestContainerDeathIsReported(t *testing.T) {
	l, _ := newLauncher(t, Options{}, nil)
	inst, err := l.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.ContainerKill(context.Background(), inst.(*instance).id, "KILL"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("death not reported")
	}
	if !strings.Contains(inst.ExitReason(), "exited with code 137") {
		t.Errorf("reason %q", inst.ExitReason())
	}
	inst.Stop(context.Background())
}

// Start-up removes everything an earlier run of the same instance left, and
// nothing of another instance; the periodic sweep removes a labelled container no
// live session owns and spares the live ones.
func TestSweeps(t *testing.T) {
	name := instanceName(t)
	old, _ := newLauncher(t, Options{Options: launcher.Options{Instance: name}}, nil)
	other, _ := newLauncher(t, Options{Options: launcher.Options{Instance: name + "-other"}}, nil)
	if _, err := old.Start(context.Background(), stubRequest()); err != nil {
		t.Fatal(err)
	}
	keep, err := other.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Stop(context.Background())

	restarted, _ := newLauncher(t, Options{Options: launcher.Options{Instance: name}}, nil)
	if n := restarted.SweepAll(context.Background()); n != 1 {
		t.Fatalf("start-up sweep removed %d, want 1", n)
	}
	if n := len(containersOf(t, name+"-other")); n != 1 {
		t.Fatalf("the other instance lost its container")
	}

	live, err := restarted.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop(context.Background())
	stray, err := engine.ContainerCreate(context.Background(), &container.Config{Image: stubImage,
		Labels: map[string]string{LabelInstance: name, LabelSession: "gone"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := restarted.Sweep(context.Background()); n != 1 {
		t.Fatalf("periodic sweep removed %d, want 1 (the stray)", n)
	}
	if _, err := engine.ContainerInspect(context.Background(), stray.ID); !cerrdefs.IsNotFound(err) {
		t.Fatal("stray container survived")
	}
	if _, err := engine.ContainerInspect(context.Background(), live.(*instance).id); err != nil {
		t.Fatal("the sweep removed a live session's container")
	}
}

// Two hubs of one -instance on one engine (hub containers, each in a network
// namespace of its own, where the instance lock does not reach) leave each
// other's browsers and networks alone while both run; once a hub is gone,
// what it left is swept. The "hubs" here are a container of the engine and
// a process of this machine, as a hub's label names either.
func TestSweepsSpareAnotherRunningHub(t *testing.T) {
	needEngine(t)
	ctx := context.Background()
	name := instanceName(t)
	l, ev := newLauncher(t, Options{Options: launcher.Options{Instance: name}}, nil)
	hubContainer, err := engine.ContainerCreate(ctx, &container.Config{Image: stubImage, Labels: map[string]string{LabelInstance: name + "-hub"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer engine.ContainerRemove(ctx, hubContainer.ID, container.RemoveOptions{Force: true})
	if err := engine.ContainerStart(ctx, hubContainer.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	hubProcess := exec.Command("sleep", "1h") // found by its pid, which the test holds
	if err := hubProcess.Start(); err != nil {
		t.Fatal(err)
	}
	defer hubProcess.Process.Kill()
	owners := []string{"container:" + hubContainer.ID, hostProcess(hubProcess.Process.Pid)}
	for i, owner := range owners {
		labels := map[string]string{LabelInstance: name, LabelHub: owner, LabelSession: fmt.Sprint(i)}
		if _, err := engine.ContainerCreate(ctx, &container.Config{Image: stubImage, Labels: labels}, nil, nil, nil, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := engine.NetworkCreate(ctx, fmt.Sprintf("%s-net-%d", name, i), network.CreateOptions{Labels: labels}); err != nil {
			t.Fatal(err)
		}
		defer engine.NetworkRemove(ctx, fmt.Sprintf("%s-net-%d", name, i))
	}
	left := func() (containers, networks int) {
		t.Helper()
		nets, err := engine.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+name))})
		if err != nil {
			t.Fatal(err)
		}
		return len(containersOf(t, name)), len(nets)
	}
	if n := l.SweepAll(ctx); n != 0 {
		t.Fatalf("the start-up sweep removed %d containers of running hubs", n)
	}
	if line := ev.Wait(t, "CONTAINERS_SPARED", time.Second); !strings.Contains(line, "[2]") || !strings.Contains(line, hubContainer.ID) {
		t.Errorf("logged %q", line)
	}
	if n := l.Sweep(ctx); n != 0 {
		t.Fatalf("a periodic sweep removed %d containers of running hubs", n)
	}
	if c, nw := left(); c != 2 || nw != 2 {
		t.Fatalf("left %d containers and %d networks of running hubs, want 2 and 2", c, nw)
	}
	// Both hubs end: what they made is an earlier run's.
	if err := engine.ContainerRemove(ctx, hubContainer.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	hubProcess.Process.Kill()
	hubProcess.Wait()
	if n := l.SweepAll(ctx); n != 2 {
		t.Fatalf("the sweep removed %d containers of gone hubs, want 2", n)
	}
	if c, nw := left(); c != 0 || nw != 0 {
		t.Fatalf("left %d containers and %d networks of gone hubs", c, nw)
	}
	// This hub's own, by its own label, are its to sweep.
	if _, err := l.Start(ctx, stubRequest()); err != nil {
		t.Fatal(err)
	}
	if got := containersOf(t, name)[0].Labels[LabelHub]; got != hostProcess(os.Getpid()) {
		t.Errorf("the container's %s label is %q, want this process's %q", LabelHub, got, hostProcess(os.Getpid()))
	}
	if n := l.SweepAll(ctx); n != 1 {
		t.Fatalf("the shutdown sweep removed %d of this hub's containers, want 1", n)
	}
}

// flakyEngine is the real engine with a switch that makes Ping fail: a fault the
// real engine cannot produce on demand without stopping it for every other test.
type flakyEngine struct {
	*client.Client
	down atomic.Bool
}

func (f *flakyEngine) Ping(ctx context.Context) (types.Ping, error) {
	if f.down.Load() {
		return types.Ping{}, errors.New("Cannot connect to the Docker daemon (injected)")
	}
	return f.Client.Ping(ctx)
}

func TestEngineDownThenBack(t *testing.T) {
	needEngine(t)
	eng := &flakyEngine{Client: engine}
	reg := prometheus.NewRegistry()
	ev, log := logtest.New(1000)
	l, err := New(Options{Options: launcher.Options{Instance: instanceName(t), StartupTimeout: 20 * time.Second, StopTimeout: 10 * time.Second}, HealthInterval: 20 * time.Millisecond}, eng, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.SweepAll(context.Background()) }) // a failed test's container too
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	ev.Wait(t, "[DOCKER_UP]", 30*time.Second)
	eng.down.Store(true)
	ev.Wait(t, "[DOCKER_DOWN]", 30*time.Second)
	if ready, why := l.Ready(); ready || !strings.Contains(why, "injected") {
		t.Fatalf("ready %v %q", ready, why)
	}
	if v := testutil.ToFloat64(mustCollector(t, reg, "websummoner_docker_up")); v != 0 {
		t.Fatalf("docker_up = %v", v)
	}
	t0 := time.Now()
	err = l.Check(context.Background(), stubRequest().Browser)
	var se *launcher.StartError
	// The engine stays down until the test says: a Check that waited for it
	// would take the bound below and more; one that answers from the health
	// state takes no time, even on a busy machine.
	if !errors.As(err, &se) || !se.Engine || !se.Down || !strings.Contains(err.Error(), "unreachable") || time.Since(t0) > 10*time.Second {
		t.Fatalf("check while down: %v after %v", err, time.Since(t0))
	}
	// The start path says the same, so the hub answers both alike (500 + Retry-After).
	if _, err := l.Start(context.Background(), launcher.Request{ID: "d", Browser: stubRequest().Browser}); !errors.As(err, &se) || !se.Down {
		t.Fatalf("start while down: %v", err)
	}
	eng.down.Store(false)
	ev.Wait(t, "[DOCKER_UP]", 30*time.Second)
	inst, err := l.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatalf("no recovery: %v", err)
	}
	inst.Stop(context.Background())
	if v := testutil.ToFloat64(mustCollector(t, reg, "websummoner_docker_up")); v != 1 {
		t.Fatalf("docker_up = %v", v)
	}
}

func mustCollector(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "copy"})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

// What a client may set is an allow-list: env, labels (never ours), time zone,
// screen, VNC. Mounts, privileges and networks are the operator's. Side ports
// are published with the driver's, on 127.0.0.1 only.
func TestContainerConfigAllowList(t *testing.T) {
	l := &Launcher{opts: Options{Options: launcher.Options{Instance: "hub1"}, Network: "grid", Mem: "1g", CPU: "0.5", Address: Published}}
	r := launcher.Request{ID: "3", Browser: config.Resolved{Name: "chrome", Version: "128.0", Browser: &config.Browser{
		Image: config.Image{Name: "img"}, Volumes: []string{"/a:/b:ro"}, Env: []string{"LANG=C"}, Mem: "2g", ShmSize: 1 << 28}},
		Options: webdriver.Options{Name: "checkout", Env: []string{"FOO=1"}, Labels: map[string]string{"team": "qa", LabelInstance: "evil"}}}
	cfg, host, err := l.containerConfig(r, "3-abc", []nat.Port{"7070/tcp"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Labels[LabelInstance] != "hub1" || cfg.Labels["team"] != "qa" || cfg.Labels[LabelSession] != "3-abc" || cfg.Labels[LabelBrowser] != "chrome 128.0" ||
		cfg.Labels["name"] != "checkout" {
		t.Errorf("labels %v (want Selenoid's name label too)", cfg.Labels)
	}
	if !slices.Contains(cfg.Env, "ENABLE_VIDEO=false") || !slices.Contains(cfg.Env, "FOO=1") {
		t.Errorf("env %v: want the client's and Selenoid's ENABLE_VIDEO", cfg.Env)
	}
	if host.Privileged || len(host.Binds) != 1 || host.NetworkMode != "grid" || host.Memory != 2<<30 || host.NanoCPUs != 5e8 || host.ShmSize != 1<<28 {
		t.Errorf("host config %+v", host)
	}
	for _, p := range []nat.Port{"4444/tcp", "7070/tcp"} {
		if b := host.PortBindings[p]; len(b) != 1 || b[0].HostIP != "127.0.0.1" {
			t.Errorf("port %s bound as %v", p, b)
		}
	}
	l.opts.Privileged = true
	if _, host, _ = l.containerConfig(r, "x", nil); !host.Privileged || len(host.CapDrop) != 0 {
		t.Error("-privileged not honoured")
	}
}

// Stop honours its context and returns what it could not do; the container it
// could not remove is the sweep's.
func TestStopReportsFailure(t *testing.T) {
	l, _ := newLauncher(t, Options{}, nil)
	inst, err := l.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := inst.Stop(ctx); err == nil || !strings.Contains(err.Error(), "the sweep retries") {
		t.Fatalf("stop with a cancelled context: %v", err)
	}
	if err2 := inst.Stop(context.Background()); err2 == nil {
		t.Fatal("a second Stop forgot the first one's failure")
	}
	if n := l.Sweep(context.Background()); n != 1 {
		t.Fatalf("sweep removed %d containers, want the one Stop left", n)
	}
}

// A container's output: followed live, and kept in -log-output-dir as logName
// when the session asked (enableLog).
func TestContainerLogs(t *testing.T) {
	dir := t.TempDir()
	// -log-conf as Selenoid's: the driver and its options, the tag defaulting
	// to the session's name.
	conf := filepath.Join(t.TempDir(), "container-logs.json")
	os.WriteFile(conf, []byte(`{"Type": "json-file", "Config": {"max-size": "1m"}}`), 0o644)
	lc, err := LoadLogConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := newLauncher(t, Options{Options: launcher.Options{LogDir: dir}, LogConfig: lc}, nil)
	r := stubRequest("WDSTUB_LOG_REQUESTS=true")
	r.Options = webdriver.Options{Name: "checkout", EnableLog: true, LogName: "kept.log", Labels: map[string]string{"team": "a"}}
	inst, err := l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	info, err := engine.ContainerInspect(context.Background(), inst.(*instance).id)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.HostConfig.LogConfig; got.Type != "json-file" || got.Config["max-size"] != "1m" || got.Config["tag"] != "checkout" || got.Config["labels"] != "team" {
		t.Fatalf("the container's log configuration %+v; want -log-conf's, tagged with the session's name", got)
	}
	inst.SessionCreated("s-1", nil)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { inst.Endpoints().Log.Follow(ctx, pw); pw.Close() }()
	lines := bufio.NewScanner(pr)
	bound := time.AfterFunc(time.Minute, func() { pr.CloseWithError(errors.New("no log line within a minute")) }) // a hang fails
	defer bound.Stop()
	go func() {
		for i := 0; i < 100 && ctx.Err() == nil; i++ {
			if resp, err := http.Get(inst.Endpoints().Driver.JoinPath("status").String()); err == nil {
				resp.Body.Close()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	// From the container's start, as Selenoid streams it: the start-up line
	// first, though it was written before the follow began.
	if !lines.Scan() || !strings.Contains(lines.Text(), "wdstub: listening on") {
		t.Fatalf("followed %q first, want the driver's start-up line", lines.Text())
	}
	for lines.Scan() && !strings.Contains(lines.Text(), "wdstub: GET /status") {
	}
	if !strings.Contains(lines.Text(), "wdstub: GET /status") {
		t.Fatalf("the live output never showed a request: last %q, %v", lines.Text(), lines.Err())
	}
	cancel()
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "kept.log"))
	if err != nil || !strings.Contains(string(data), "wdstub: listening on") {
		t.Fatalf("kept log %q: %v", data, err)
	}
	// Each kept line begins with its timestamp, as Selenoid keeps them.
	stamped := regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z `)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !stamped.MatchString(line) {
			t.Fatalf("kept log line without a timestamp: %q", line)
		}
	}
}

// -log-conf is read as Selenoid's file; a file that is not one fails, naming
// the flag.
func TestLoadLogConfig(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		`{"Type": "syslog", "Config": {"tag": "grid"}}`: "",
		`{"Type": "json-file"}`:                         "",
		`not json`:                                      "-log-conf",
		`{"Config": {"max-size": "1m"}}`:                "without \"Type\"",
	} {
		f := filepath.Join(dir, "c.json")
		os.WriteFile(f, []byte(body), 0o644)
		lc, err := LoadLogConfig(f)
		if want == "" && (err != nil || lc.Type == "") || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %+v %v, want error %q", body, lc, err, want)
		}
	}
	if _, err := LoadLogConfig(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "-log-conf") {
		t.Errorf("a missing file: %v", err)
	}
	// The operator's tag wins over the session's name.
	if lc := logConfig(&container.LogConfig{Type: "syslog", Config: map[string]string{"tag": "grid"}}, "checkout", nil); lc.Config["tag"] != "grid" {
		t.Errorf("tag %q, want the operator's", lc.Config["tag"])
	}
	// Docker reads the tag as a template: a name is kept as text, not run
	// ({{ alone failed the container's start: "unclosed action").
	if lc := logConfig(&container.LogConfig{Type: "syslog", Config: map[string]string{}}, `{{ test }} {{{printf "%09d" 1}}}`, nil); strings.Contains(lc.Config["tag"], "{{") || strings.Contains(lc.Config["tag"], "}}") {
		t.Errorf("tag %q is a template", lc.Config["tag"])
	}
}

// The shared start-policy table, in real containers of the stub image.
func TestEnvPrecedence(t *testing.T) {
	l, _ := newLauncher(t, Options{}, nil)
	launchertest.RunEnvCases(t, true, func(c launchertest.EnvCase) (launcher.Instance, error) {
		r := stubRequest(c.Operator...)
		r.Browser.ClientEnv, r.Options = c.ClientEnv, c.Options
		return l.Start(context.Background(), r)
	})
}

func TestEndpointsChoice(t *testing.T) {
	info := container.InspectResponse{NetworkSettings: &container.NetworkSettings{}}
	info.NetworkSettings.Ports = nat.PortMap{"4444/tcp": []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: "32770"}},
		"5900/tcp": []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: "32771"}}}
	side := exposedSidePorts(map[string]struct{}{"5900/tcp": {}, "8080/tcp": {}, "22/tcp": {}})
	if len(side) != 2 {
		t.Fatalf("side ports %v", side)
	}
	// aerokube's images expose their driver's port only: Selenoid's contract,
	// all of it, as Selenoid publishes it.
	if all := exposedSidePorts(map[string]struct{}{"4444/tcp": {}}); len(all) != len(sidePorts) {
		t.Fatalf("side ports of an image exposing 4444 only: %v, want all of %d", all, len(sidePorts))
	}
	e, err := endpointsOf(Published, localEngine, info, "c1", "", "4444", "/wd/hub", side)
	if err != nil || e.Driver.String() != "http://127.0.0.1:32770/wd/hub" || e.VNC.String() != "tcp://127.0.0.1:32771" {
		t.Fatalf("published: %+v %v", e, err)
	}
	if e.DevTools != nil || e.Files != nil || e.Clipboard != nil {
		t.Fatalf("absent services given endpoints: %+v", e)
	}
	if ports := loopbackPorts(e); fmt.Sprint(ports) != "[32770 32771]" {
		t.Errorf("ports refused to sandboxed browsers: %v, want the driver's and VNC's", ports)
	}
	e, err = endpointsOf(ByName, localEngine, info, "c1", "", "4444", "/", side)
	if err != nil || e.Driver.String() != "http://c1:4444/" || e.Files.String() != "http://c1:8080" {
		t.Fatalf("by name: %+v %v", e, err)
	}
	if ports := loopbackPorts(e); len(ports) != 0 {
		t.Errorf("by name, nothing is on the host's loopback; refused %v", ports)
	}
	if _, err := endpointsOf(Published, localEngine, container.InspectResponse{NetworkSettings: &container.NetworkSettings{}}, "c1", "", "4444", "/", nil); err == nil {
		t.Fatal("unpublished port accepted")
	}
	if _, err := New(Options{Address: ByName}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "-container-network") {
		t.Fatalf("by name without a network: %v", err)
	}
	if _, err := New(Options{Address: "addr"}, nil, nil, nil); err == nil {
		t.Fatal("unknown address mode accepted")
	}
}

// leavingEngine is the real engine whose ContainerCreate sees the client
// leave while the engine makes the container: the fault behind containers
// and networks left until the next sweep, which a real client cannot time.
type leavingEngine struct {
	Engine
	leave context.CancelFunc
}

func (e *leavingEngine) ContainerCreate(ctx context.Context, config *container.Config, host *container.HostConfig, netCfg *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error) {
	e.leave()
	// The engine goes on making it, whatever became of the call.
	resp, err := e.Engine.ContainerCreate(context.WithoutCancel(ctx), config, host, netCfg, platform, name)
	if ctx.Err() != nil {
		return resp, ctx.Err() // what the client library answers a cancelled call
	}
	return resp, err
}

// A client that leaves while its container is being made leaves nothing
// behind once Start has returned: left to the next sweep, containers and
// session networks pile up, and Docker's address pools are small.
func TestClientLeavingDuringCreateLeavesNothing(t *testing.T) {
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	l, _ := newLauncher(t, Options{}, &leavingEngine{Engine: engine, leave: leave})
	if _, err := l.Start(ctx, stubRequest()); err == nil {
		t.Fatal("a start whose client left succeeded")
	}
	if n := len(containersOf(t, l.opts.Instance)); n != 0 {
		t.Fatalf("%d containers left once Start returned", n)
	}
	nets, err := engine.NetworkList(context.Background(), network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+l.opts.Instance))})
	if err != nil || len(nets) != 0 {
		t.Fatalf("networks left once Start returned: %v %v", nets, err)
	}
}

// removeOnceFails is the real engine whose first container removal fails,
// as when `docker rm -f` is already removing it (409) or the engine stops
// answering in the middle of a teardown: races the real engine does not
// produce on demand.
type removeOnceFails struct {
	Engine
	failed atomic.Bool
}

func (e *removeOnceFails) ContainerRemove(ctx context.Context, id string, o container.RemoveOptions) error {
	if e.failed.CompareAndSwap(false, true) {
		return errors.New("removal of container " + id + " is already in progress (injected)")
	}
	return e.Engine.ContainerRemove(ctx, id, o)
}

// removedElsewhere is the engine while someone else (docker rm -f) removes
// each container the hub does: the engine answers 409 "already in progress",
// which a real engine gives only in that race.
type removedElsewhere struct{ Engine }

func (e removedElsewhere) ContainerRemove(ctx context.Context, id string, o container.RemoveOptions) error {
	if err := e.Engine.ContainerRemove(ctx, id, o); err != nil {
		return err
	}
	return fmt.Errorf("removal of container %s is already in progress: %w", id, cerrdefs.ErrConflict)
}

// A container that someone else is removing when the session ends is going:
// the teardown is no failure, and nothing is left to the sweep or logged as
// a removal that failed.
func TestRemovalAlreadyInProgressIsNoFailure(t *testing.T) {
	l, ev := newLauncher(t, Options{}, removedElsewhere{Engine: engine})
	inst, err := l.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	ev.Wait(t, "CONTAINER_REMOVED_ELSEWHERE", 5*time.Second)
	l.mu.Lock()
	dangling := len(l.dangling)
	l.mu.Unlock()
	if dangling != 0 {
		t.Errorf("%d containers left to the sweep", dangling)
	}
	for {
		select {
		case line := <-ev:
			if strings.Contains(line, "REMOVE_FAILED") {
				t.Errorf("logged %q", line)
			}
			continue
		default:
		}
		return
	}
}

// A teardown whose removal fails leaves the container, its network and its
// published ports to the next sweep, which takes all three: the network was
// held as a live session's for the hub's whole life, and Docker's address
// pools hold about 30 of them.
func TestFailedRemovalIsTheSweepsWhole(t *testing.T) {
	ports := &egress.PortSet{}
	l, _ := newLauncher(t, Options{Published: ports, Address: Published}, &removeOnceFails{Engine: engine})
	inst, err := l.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	pub := inst.(*instance).published
	if len(pub) == 0 || !ports.Holds(pub[0]) {
		t.Fatalf("the session's published ports %v are not refused to sandboxes", pub)
	}
	if err := inst.Stop(context.Background()); err == nil {
		t.Fatal("the injected removal failure was not reported")
	}
	if !ports.Holds(pub[0]) {
		t.Fatal("ports given back while their container may still publish them")
	}
	l.Sweep(context.Background())
	if n := len(containersOf(t, l.opts.Instance)); n != 0 {
		t.Fatalf("%d containers left after the sweep", n)
	}
	nets, err := engine.NetworkList(context.Background(), network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+l.opts.Instance))})
	if err != nil || len(nets) != 0 {
		t.Fatalf("networks left after the sweep: %v %v", nets, err)
	}
	if ports.Holds(pub[0]) {
		t.Fatalf("port %d still refused to sandboxes after its container was swept", pub[0])
	}
}

// hangingEngine is flakyEngine whose engine stops answering in the middle of
// creating a container: the call hangs and pings fail from then on, as when
// dockerd freezes under a start (a fault the real engine cannot produce on
// demand without stopping it for every other test).
type hangingEngine struct{ *flakyEngine }

func (e hangingEngine) ContainerCreate(ctx context.Context, config *container.Config, host *container.HostConfig, netCfg *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error) {
	e.down.Store(true)
	<-ctx.Done()
	return container.CreateResponse{}, ctx.Err()
}

// A start under way when the engine stops answering ends at
// -service-startup-timeout as the engine being down (500 + Retry-After, not
// counted against the browser), not as a browser too slow to start.
func TestEngineHangsDuringAStart(t *testing.T) {
	needEngine(t)
	eng := hangingEngine{&flakyEngine{Client: engine}}
	ev, log := logtest.New(1000)
	l, err := New(Options{Options: launcher.Options{Instance: instanceName(t), StartupTimeout: 10 * time.Second, StopTimeout: 10 * time.Second}, HealthInterval: 20 * time.Millisecond}, eng, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.SweepAll(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	ev.Wait(t, "[DOCKER_UP]", 30*time.Second)
	_, err = l.Start(context.Background(), stubRequest())
	var se *launcher.StartError
	if !errors.As(err, &se) || !se.Down || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("a start the engine froze under: %v (down %v)", err, se != nil && se.Down)
	}
}

// engineElsewhere is the local engine as a rootless one, or Docker
// Desktop's, reports itself: its bridges may have the same addresses as a
// rootful engine's beside it, but are not this host's.
type engineElsewhere struct {
	Engine
	info system.Info
}

func (e engineElsewhere) Info(ctx context.Context) (system.Info, error) { return e.info, nil }

// The hub reaches containers by their addresses only from an engine whose
// bridges are this host's: never a rootless one's, nor Docker Desktop's.
func TestBridgesOnHostOnlyForAnEngineOfThisHost(t *testing.T) {
	needEngine(t)
	for _, info := range []system.Info{
		{SecurityOptions: []string{"name=seccomp,profile=builtin", "name=rootless"}},
		{OperatingSystem: "Docker Desktop"},
	} {
		l, err := New(Options{}, engineElsewhere{engine, info}, nil, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if l.bridgesOnHost(context.Background()) {
			t.Errorf("an engine reporting %+v taken for one whose bridges are this host's", info)
		}
	}
}
