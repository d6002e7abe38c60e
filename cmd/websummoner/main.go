// Command websummoner is a Selenium-compatible browser grid hub: a drop-in for
// Selenoid's flags, browsers.json and endpoints, with a queue that says when the
// grid is jammed. This file binds flags straight into each component's Options
// (as Prometheus's main does with its flagConfig), builds the components — each
// validates its own Options — and serves; the behaviour lives in internal/.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/websummoner/websummoner/internal/auth"
	"github.com/websummoner/websummoner/internal/capacity"
	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/egress"
	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/hub"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/launcher/docker"
	"github.com/websummoner/websummoner/internal/launcher/kube"
	"github.com/websummoner/websummoner/internal/launcher/process"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/netns"
	"github.com/websummoner/websummoner/internal/pool"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/retention"
	"github.com/websummoner/websummoner/internal/session"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit statuses: 2 for a value the operator must change (a flag, the -conf
// file, the -listen address), 1 for a failure while serving.
const (
	exitServe  = 1
	exitConfig = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// flagConfig is every command-line setting, bound into the Options of the
// component that owns it.
type flagConfig struct {
	listen, conf, logLevel, logOutputDir string
	// allowedHosts is -allowed-hosts as given; hub.AllowedHosts is set from
	// it and -listen by allowedHosts.
	allowedHosts                       string
	logFormat                          string
	disableDocker, showVersion, health bool
	processSandbox                     string
	gracefulPeriod                     time.Duration

	server   httpserver.Options
	auth     auth.Options
	admins   string
	queue    queue.Options
	gate     capacity.Options
	hub      hub.Options
	sessions session.Options
	launch   launcher.Options // shared by both launchers
	process  process.Options
	docker   docker.Options
	// kube is the Kubernetes launcher's (-kubernetes), and kubeconfig,
	// kubeQPS and kubeBurst its API client's.
	kube       kube.Options
	kubernetes bool
	kubeconfig string
	kubeQPS    float64
	kubeBurst  int
	// logKeep and videoKeep are -log-retention-* and -video-retention-*.
	logKeep, videoKeep retention.Options

	// ignored are the Selenoid flags accepted and ignored that the command line set.
	ignored []selenoidFlag
	// logConf is -log-conf: browser containers' log driver, a JSON file.
	logConf string
	// quotas is -quotas: each tenant's share of the slots, a JSON file.
	quotas string
}

// selenoidFlag is a Selenoid flag accepted so that its command lines work
// unchanged, and ignored with a warning that says why (docs/flags.md). bool
// flags stay boolean, as in Selenoid: "-enable-file-upload -limit 2" must parse.
type selenoidFlag struct {
	name, why string
	bool      bool
}

var ignoredSelenoidFlags = []selenoidFlag{
	{name: "enable-file-upload", bool: true, why: "file upload always works (/se/file is rewritten to /file, bounded by -max-upload-size)"},
	{name: "disable-privileged", bool: true, why: "containers are unprivileged by default already"},
	{name: "cgroup-parent", why: "not supported"},
	{name: "max-timeout-per-quota", why: "quotas are not supported"},
}

// parseFlags binds the command line into a flagConfig. Ranges are not checked
// here: each component's Options.Validate (or the queue's Resolve) does that,
// once, when it is built.
func parseFlags(args []string, stderr io.Writer) (*flagConfig, error) {
	c := &flagConfig{}
	fs := flag.NewFlagSet("websummoner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	fs.StringVar(&c.listen, "listen", ":4444", "Network address to accept connections on (\":4444\" is every interface)")
	fs.StringVar(&c.allowedHosts, "allowed-hosts", "", "Host names, comma-separated, that requests may name the hub by besides IP addresses and localhost (\".example.com\": the domain and every name under it); any other Host is refused, against DNS rebinding by web pages. Empty: checked only when -listen is loopback; \"*\": never checked")
	fs.StringVar(&c.conf, "conf", "config/browsers.json", "Browsers configuration file (Selenoid's browsers.json format)")
	fs.StringVar(&c.logLevel, "log-level", "info", "Log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "Log format: text (Selenoid's \"[id] [EVENT] [details]\" lines) or json (one object per line with stable keys, for log shippers)")
	fs.StringVar(&c.docker.VideoDir, "video-output-dir", "video", "Where session videos (enableVideo) are written, served at /video/; created if missing")
	fs.StringVar(&c.docker.VideoImage, "video-recorder-image", "websummoner/recorder:latest", "Image of the video recorder started next to a browser that records (images/recorder/build.sh builds it)")
	c.docker.VideoMaxSize = launcher.DefaultVideoMaxSize
	fs.Func("video-max-size", "A recording ends at this size, e.g. 2g; a larger file (a recorder image that ignores the bound) is not kept (0 = no bound; default 8g)", retentionSize(&c.docker.VideoMaxSize))
	fs.StringVar(&c.logOutputDir, "log-output-dir", "", "Keep the output of sessions that ask (enableLog) in this directory as their logName or <session-id>.log, served at /logs/")
	fs.BoolVar(&c.launch.SaveAllLogs, "save-all-logs", false, "With -log-output-dir, keep every session's log, asked or not")
	fs.DurationVar(&c.logKeep.MaxAge, "log-retention-age", 0, "Remove kept logs in -log-output-dir last written longer ago than this, e.g. 168h (0 = keep everything)")
	fs.Func("log-retention-size", "Remove the oldest kept logs until -log-output-dir holds at most this much, e.g. 10g (0 = keep everything)", retentionSize(&c.logKeep.MaxSize))
	fs.DurationVar(&c.videoKeep.MaxAge, "video-retention-age", 0, "Remove videos in -video-output-dir written longer ago than this, e.g. 168h (0 = keep everything)")
	fs.Func("video-retention-size", "Remove the oldest videos until -video-output-dir holds at most this much, e.g. 100g (0 = keep everything)", retentionSize(&c.videoKeep.MaxSize))
	fs.StringVar(&c.processSandbox, "process-sandbox", "auto", "Run each local driver in a sandbox of its own (bubblewrap: own network namespace, unprivileged user, private /tmp, no view of the host's files): on, off, or auto (on under -htpasswd, where more than one user shares the host; the hub refuses to start there without it)")
	fs.BoolVar(&c.disableDocker, "disable-docker", false, "Run browsers as local driver processes (image = command line) and never connect to Docker")
	fs.BoolVar(&c.kubernetes, "kubernetes", false, "Run image entries as Kubernetes pods, one per session, instead of Docker containers (docs/kubernetes.md)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "With -kubernetes: the kubeconfig file; empty means the in-cluster service account, then $KUBECONFIG, then ~/.kube/config")
	fs.StringVar(&c.kube.Namespace, "namespace", "", "With -kubernetes: the namespace of the browsers' pods; empty means the hub's own (in the cluster) or the kubeconfig context's, else \"default\"")
	fs.Float64Var(&c.kubeQPS, "kube-qps", 20, "With -kubernetes: API requests a second the hub may make on average (client-go's QPS)")
	fs.IntVar(&c.kubeBurst, "kube-burst", 40, "With -kubernetes: API requests the hub may make at once above -kube-qps (client-go's burst)")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit")
	fs.BoolVar(&c.health, "healthcheck", false, "Ask the hub serving on -listen (on this host) whether it is healthy: exit 0 if /healthz answers 200, else 1 (a container HEALTHCHECK with no shell or curl)")
	fs.DurationVar(&c.gracefulPeriod, "graceful-period", 300*time.Second, "On SIGTERM, how long live sessions may run on before they are ended")

	fs.DurationVar(&c.server.IdleTimeout, "idle-connection-timeout", httpserver.DefaultIdleTimeout, "Close a keep-alive connection with no request for this long (0 = the default)")
	fs.DurationVar(&c.server.BodyTimeout, "body-read-timeout", httpserver.DefaultBodyTimeout, "A request's body must arrive whole within this long of its headers (0 = the default)")
	fs.StringVar(&c.server.TLSCert, "tls-cert", "", "Serve HTTPS with this certificate (PEM); needs -tls-key")
	fs.StringVar(&c.server.TLSKey, "tls-key", "", "The private key of -tls-cert (PEM)")
	fs.BoolFunc("first-byte-gate", "Keep an accepted connection out of the HTTP server, at the cost of its descriptor alone, until its client sends something (default true; false: the server takes every connection at once)", func(v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("-first-byte-gate takes true or false (got %q)", v)
		}
		c.server.NoFirstByteGate = !on
		return nil
	})

	fs.StringVar(&c.quotas, "quotas", "", "Share the slots between tenants (-htpasswd users, or -tenant-header values): a JSON file of weight, maxSessions and maxQueued per tenant, \"*\" for the rest; SIGHUP reloads it (docs/quotas.md)")
	fs.StringVar(&c.hub.TenantHeader, "tenant-header", "", "Without -htpasswd, take each request's tenant from this header, set by a trusted front (the hub cannot check it); empty: one tenant for all")
	fs.StringVar(&c.auth.File, "htpasswd", "", "Require HTTP basic auth of these users (htpasswd -B file; SIGHUP reloads it); each session belongs to its creator")
	fs.StringVar(&c.admins, "admin-users", "", "Comma-separated users of -htpasswd who see and may drive every session")

	fs.IntVar(&c.queue.Limit, "limit", queue.DefaultLimit, "Simultaneous sessions (slots); at least 1")
	fs.DurationVar(&c.queue.Timeout, "queue-timeout", 0, "Keeping-up wait budget of a queued request; derives the fast threshold and saturated budget (0 = wait until the client gives up)")
	fs.DurationVar(&c.queue.CongestionTimeout, "queue-congestion-timeout", 0, "Saturated wait budget, used as given (default -queue-timeout/10, at least 1s; 0 = refuse at once when saturated)")
	fs.BoolVar(&c.queue.Disabled, "disable-queue", false, "Refuse new sessions at once when all slots are busy instead of queueing")
	fs.IntVar(&c.queue.MaxWaiting, "queue-max", 0, "Most requests that may wait at once; more are refused with 429 (0 = unbounded)")
	c.queue.MaxWaitingBytes = queue.DefaultMaxWaitingBytes
	fs.Func("queue-max-bytes", "Most capabilities' bytes the waiting requests may hold together, e.g. 512m or 4g; one that would pass it is refused with 429, unless it is the only one waiting (default 1g; 0 = unbounded)", func(v string) error {
		n, err := config.ParseMem(v)
		if err != nil || n < 0 {
			return fmt.Errorf("-queue-max-bytes must be 0 (unbounded) or a size such as 512m or 4g (got %q)", v)
		}
		c.queue.MaxWaitingBytes = n
		return nil
	})
	fs.Var(capacity.ModeFlag{O: &c.gate}, "start-gate", "Concurrent browser starts: \"adaptive\" (driven by start outcomes, latency and engine health, up to -limit), a fixed number, or \"off\" (every admitted request starts at once, as Selenoid)")

	fs.DurationVar(&c.hub.IdleTimeout, "timeout", 60*time.Second, "Session idle timeout: a session with no command for this long ends (0 = never)")
	fs.DurationVar(&c.hub.MaxTimeout, "max-timeout", time.Hour, "Maximum idle timeout a client may ask for with sessionTimeout (0 = no cap)")
	fs.DurationVar(&c.hub.SessionAttemptTimeout, "session-attempt-timeout", hub.DefaultSessionAttemptTimeout, "How long the driver's new-session call may take, per attempt (0 = the default)")
	fs.IntVar(&c.hub.RetryCount, "retry-count", 1, "Attempts to start a browser for one new-session request (0 = the default, 1)")
	fs.Func("max-upload-size", "Largest file upload passed to a driver, e.g. 64m or 1g (Selenium's send_keys of a local file)", func(v string) error {
		n, err := config.ParseMem(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a size such as 64m or 1g", v)
		}
		c.hub.MaxUploadSize = n
		return nil
	})
	fs.IntVar(&c.hub.MaxSideChannelsPerSession, "max-side-channels-per-session", hub.DefaultMaxSideChannelsPerSession, "Most live-log, VNC, DevTools and BiDi connections open at once to one session; one more is refused with 429 (0 = the default)")
	fs.IntVar(&c.hub.MaxSideChannelsPerClient, "max-side-channels-per-client", hub.DefaultMaxSideChannelsPerClient, "Most live-log, VNC, DevTools and BiDi connections one client (its -htpasswd user, else its IP address) has open at once across sessions; one more is refused with 429 (0 = the default)")
	fs.Func("warm-pool", "Browsers kept ready before they are asked for, each handed to one client and never reused: \"off\", \"adaptive\" (sized from the arrival rate of matching requests), or a count per browser's default version (docs/pool.md)", func(v string) error {
		var err error
		c.hub.WarmPool.Size, c.hub.WarmPool.Adaptive, err = pool.ParseMode(v)
		return err
	})
	fs.DurationVar(&c.hub.WarmPool.MaxAge, "warm-pool-max-age", pool.DefaultMaxAge, "Replace a ready browser of the warm pool no client has taken for this long")
	fs.DurationVar(&c.sessions.MaxLifetime, "max-session-lifetime", 0, "End any session this long after it started, busy or not (0 = never)")

	fs.DurationVar(&c.launch.StartupTimeout, "service-startup-timeout", launcher.DefaultStartupTimeout, "How long a browser's driver may take to answer after it is started (0 = the default)")
	fs.DurationVar(&c.launch.StopTimeout, "session-delete-timeout", launcher.DefaultStopTimeout, "How long deleting a session and stopping its browser may take before it is killed (0 = the default)")
	fs.StringVar(&c.launch.Instance, "instance", "websummoner-"+host, "Name of this hub instance; what an earlier run of the same name left running is removed at start-up")
	fs.BoolVar(&c.process.CaptureLogs, "capture-driver-logs", false, "Copy each driver's output into the hub's log")

	fs.StringVar(&c.docker.Network, "container-network", "default", "Docker network for browser containers")
	fs.BoolVar(&c.docker.Privileged, "privileged", false, "Run browser containers privileged (Selenoid's default; off here)")
	fs.StringVar(&c.docker.Mem, "mem", "", "Default memory limit of a browser container, e.g. 512m or 1g (browsers.json \"mem\" wins)")
	fs.StringVar(&c.docker.CPU, "cpu", "", "Default CPU limit of a browser container, e.g. 0.5 or 2.0 (browsers.json \"cpu\" wins)")
	fs.Int64Var(&c.docker.PidsLimit, "container-pids-limit", docker.DefaultPidsLimit, "Most processes and threads in one browser container, so that a fork bomb in one session cannot take the host's PID space (0 = no limit)")
	fs.StringVar((*string)(&c.docker.Address), "container-address", "", "How the hub reaches a container's driver: \"published\" (a port published on 127.0.0.1; hub on the host), \"ip\" (the container's address; hub in a container of the same engine, which joins each session's network) or \"name\" (the container's name on -container-network); empty: \"ip\" when the hub runs in a container of the engine, or on the host of a local engine whose bridges are the host's (not rootless, nor Docker Desktop) without -container-network, \"published\" otherwise")
	fs.DurationVar(&c.docker.SweepInterval, "sweep-interval", 30*time.Second, "How often containers with no live session are removed (0 = the default)")

	for _, s := range ignoredSelenoidFlags {
		usage := "Ignored (Selenoid compatibility): " + s.why
		if s.bool {
			fs.Bool(s.name, false, usage)
		} else {
			fs.String(s.name, "", usage)
		}
	}
	fs.StringVar(&c.logConf, "log-conf", "", "Browser containers' log driver and its options, a JSON file as Selenoid's: {\"Type\": \"json-file\", \"Config\": {\"max-size\": \"10m\"}}; \"tag\" defaults to the session's name (empty: the engine's default driver)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: every setting is a -flag", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, s := range ignoredSelenoidFlags {
		if set[s.name] {
			c.ignored = append(c.ignored, s)
		}
	}
	if c.logConf != "" && c.disableDocker {
		c.ignored = append(c.ignored, selenoidFlag{name: "log-conf", why: "it sets browser containers' log driver, and this hub runs none (-disable-docker)"})
	}
	if c.queue.Limit == 0 {
		// The queue reads a zero limit as its default; on the command line it
		// is a mistake.
		return nil, fmt.Errorf("-limit must be a whole number from 1 to %d (got 0)", queue.MaxLimit)
	}
	c.queue.CongestionTimeoutSet = set["queue-congestion-timeout"]
	c.gate.Limit = c.queue.Limit
	c.hub.SessionDeleteTimeout = c.launch.StopTimeout
	// A request that may not wait for a slot but has one waits for its
	// start's turn, or for its slot's teardown, as long as one browser may
	// take to start (its driver, then its first attempt at a session) or to
	// stop.
	launch := c.launch.WithDefaults()
	attempt := cmp.Or(max(c.hub.SessionAttemptTimeout, 0), hub.DefaultSessionAttemptTimeout)
	c.queue.TurnTimeout = max(launch.StartupTimeout+attempt, launch.StopTimeout)
	c.launch.LogDir = c.logOutputDir
	c.process.Options, c.docker.Options, c.kube.Options = c.launch, c.launch, c.launch
	c.kube.Mem, c.kube.CPU, c.kube.SweepInterval = c.docker.Mem, c.docker.CPU, c.docker.SweepInterval
	if c.kubernetes && c.disableDocker {
		return nil, errors.New("-kubernetes runs the image entries of browsers.json as pods, and -disable-docker says there are none: give one of them")
	}
	c.hub.LogDir = c.logOutputDir
	c.logKeep.Kind, c.logKeep.Dir = "log", c.logOutputDir
	c.videoKeep.Kind = "video" // its Dir once -video-output-dir is known to be usable (build)
	if c.admins != "" {
		c.auth.Admins = strings.Split(c.admins, ",")
	}
	if c.gracefulPeriod < 0 {
		return nil, fmt.Errorf("-graceful-period must be 0 or a positive duration such as 300s (got %v)", c.gracefulPeriod)
	}
	return c, nil
}

// program is the built hub, ready to serve.
type program struct {
	c          *flagConfig
	log        *slog.Logger
	server     *httpserver.Server
	auth       *auth.Store
	conf       *config.Store
	queue      *queue.Queue
	sessions   *session.Registry
	procs      *process.Launcher
	containers imageLauncher // nil with -disable-docker
	hub        *hub.Hub

	retention []*retention.Retention // -log-retention-*, -video-retention-*
	// reloaded is websummoner_config_last_reload_successful, by file.
	reloaded *prometheus.GaugeVec
}

func run(args []string, stdout, stderr io.Writer) int {
	// Signals are caught from the start: SIGHUP's default action ends the
	// process, and start-up (the sweep of an earlier run's browsers above
	// all) can take seconds, during which a reload sent by a config
	// manager killed the hub without a word. serve acts on what came.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return exitConfig
	}
	if c.showVersion {
		fmt.Fprintln(stdout, "websummoner", version)
		return 0
	}
	if c.health {
		return healthcheck(c, stderr)
	}
	p, err := build(c, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return exitConfig
	}
	return p.serve(sigs)
}

// build makes every component from its Options. It starts nothing and touches
// nothing outside the process, so a bad value stops start-up before any side
// effect.
func build(c *flagConfig, stderr io.Writer) (*program, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("-log-level must be debug, info, warn or error (got %q)", c.logLevel)
	}
	var handler slog.Handler
	switch c.logFormat {
	case "text", "":
		handler = logtag.NewHandler(stderr, level)
	case "json":
		handler = logtag.NewJSONHandler(stderr, level)
	default:
		return nil, fmt.Errorf("-log-format must be text or json (got %q)", c.logFormat)
	}
	p := &program{c: c, log: slog.New(handler)}
	if err := c.launch.Validate(); err != nil {
		return nil, err
	}
	var err error
	if p.conf, err = config.Load(c.conf, !c.disableDocker); err != nil {
		return nil, err
	}
	p.configWarnings()
	if c.logOutputDir != "" {
		if err := writableDir(c.logOutputDir); err != nil {
			return nil, fmt.Errorf("-log-output-dir %s: %v", c.logOutputDir, err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.reloaded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "websummoner_config_last_reload_successful",
		Help: "Whether the last load of a file SIGHUP reloads (browsers.json, quotas, htpasswd) succeeded; 0: the hub runs on the file's previous content, and a restart would fail on the file as it is.",
	}, []string{"file"})
	reg.MustRegister(p.reloaded)
	for file, given := range map[string]bool{"browsers.json": true, "quotas": c.quotas != "", "htpasswd": c.auth.File != ""} {
		if given {
			p.reloaded.WithLabelValues(file).Set(1)
		}
	}
	gate, err := capacity.New(c.gate, p.log, reg)
	if err != nil {
		return nil, err
	}
	c.queue.Gate = gate
	if c.quotas != "" {
		if c.queue.Quotas, err = queue.LoadQuotas(c.quotas); err != nil {
			return nil, err
		}
	}
	if p.queue, err = queue.New(c.queue, p.log, reg); err != nil {
		return nil, err
	}
	if p.sessions, err = session.New(c.sessions, p.log, reg); err != nil {
		return nil, err
	}
	// One Transport to drivers for the launchers' readiness polls and the
	// hub's calls and commands, dialling into sandboxes where there are some.
	dialer := netns.New(net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second})
	drivers := hub.NewTransport(dialer.DialContext)
	c.hub.Transport = drivers
	if c.process.Sandbox, err = processSandbox(c.processSandbox, c.auth.File != "", dialer); err != nil {
		return nil, err
	}
	if c.process.Sandbox != nil {
		// Containers' ports on the host's loopback are other sessions'
		// browsers: the sandboxes' proxies refuse them.
		published := &egress.PortSet{}
		c.docker.Published = published
		c.process.Sandbox.Egress = &egress.Guard{Ports: published}
	}
	// Which one is in force is said at every start: it is what keeps users'
	// local browsers apart.
	switch {
	case c.process.Sandbox != nil:
		logtag.Event(p.log, slog.LevelInfo, "", "SANDBOX", fmt.Sprintf("-process-sandbox %s: local drivers each run in a bubblewrap sandbox of their own", c.processSandbox))
	case c.processSandbox == "off":
		logtag.Event(p.log, slog.LevelInfo, "", "NO_SANDBOX", "-process-sandbox off: local drivers run as the hub's user, on its loopback, and users can reach each other's browsers")
	default:
		logtag.Event(p.log, slog.LevelInfo, "", "NO_SANDBOX", "local drivers run as the hub's user, on its loopback: fit for one user (-process-sandbox on, or -htpasswd, sandboxes them)")
	}
	c.process.ReadyTransport, c.docker.ReadyTransport = drivers, drivers
	p.procs = process.New(c.process, p.log)
	launchers := hub.Launchers{Process: p.procs}
	if c.kubernetes && (c.docker.Privileged || c.docker.PidsLimit != docker.DefaultPidsLimit) {
		logtag.Event(p.log, slog.LevelWarn, "", "INIT", "-privileged and -container-pids-limit are the Docker launcher's, and do nothing with -kubernetes: a pod's PID limit is the kubelet's podPidsLimit, and the hub makes no privileged pods")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil && !c.disableDocker && !c.kubernetes && c.docker.PidsLimit > 0 {
		if pidMax, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && int64(c.queue.Limit)*c.docker.PidsLimit >= pidMax {
			logtag.Event(p.log, slog.LevelWarn, "", "INIT", fmt.Sprintf("-limit %d times -container-pids-limit %d reaches the host's kernel.pid_max %d: sessions that all fork without end could still take the host's PID space; lower -container-pids-limit, or raise kernel.pid_max", c.queue.Limit, c.docker.PidsLimit, pidMax))
		}
	}
	if d := c.docker.VideoDir; d != "" && !c.disableDocker {
		// Not fatal: a hub whose directory is read-only still serves browsers.
		if err := writableDir(d); err != nil {
			logtag.Event(p.log, slog.LevelWarn, "", "INIT", fmt.Sprintf("-video-output-dir %s: %v; enableVideo is refused until the hub restarts with it writable", d, err))
			c.docker.VideoDir = ""
		}
	}
	if !c.disableDocker {
		c.hub.VideoDir = c.docker.VideoDir
	}
	switch {
	case c.kubernetes:
		client, cfg, ns, err := kubeClient(c.kubeconfig, c.kubeQPS, c.kubeBurst)
		if err != nil {
			return nil, err
		}
		if c.kube.Namespace == "" {
			c.kube.Namespace = ns
		}
		// client-go's own log lines (a watch that broke, a throttled
		// request) join the hub's.
		klog.SetSlogLogger(p.log)
		c.kube.OnHealth = gate.SetHealthy
		c.kube.ReadyTransport = drivers
		c.kube.VideoDir, c.kube.VideoImage, c.kube.VideoMaxSize = c.docker.VideoDir, c.docker.VideoImage, c.docker.VideoMaxSize
		c.kube.Exec = kube.NewExecer(cfg, client)
		pods, err := kube.New(c.kube, client, p.log, reg)
		if err != nil {
			return nil, err
		}
		p.containers, launchers.Docker = pods, pods
	case !c.disableDocker:
		engine, err := docker.NewEngine()
		if err != nil {
			return nil, fmt.Errorf("connecting to the Docker engine: %v (check DOCKER_HOST, or run with -disable-docker)", err)
		}
		c.docker.OnHealth = gate.SetHealthy
		if c.logConf != "" {
			if c.docker.LogConfig, err = docker.LoadLogConfig(c.logConf); err != nil {
				return nil, err
			}
		}
		containers, err := docker.New(c.docker, engine, p.log, reg)
		if err != nil {
			return nil, err
		}
		p.containers, launchers.Docker = containers, containers
	}
	c.videoKeep.Dir = c.hub.VideoDir
	for _, o := range []retention.Options{c.logKeep, c.videoKeep} {
		r, err := retention.New(o, p.log, reg)
		if err != nil {
			return nil, err
		}
		p.retention = append(p.retention, r)
	}
	if p.auth, err = auth.New(c.auth); err != nil {
		return nil, err
	}
	c.hub.Auth = p.auth
	if c.hub.AllowedHosts, err = allowedHosts(c.allowedHosts, c.listen, machineNames()); err != nil {
		return nil, err
	}
	c.hub.Version = version
	c.hub.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	c.hub.Gate = gate
	if p.hub, err = hub.New(c.hub, p.queue, p.conf, launchers, p.sessions, p.log, reg); err != nil {
		return nil, err
	}
	if p.server, err = httpserver.New(c.server, p.hub, p.log); err != nil {
		return nil, err
	}
	return p, nil
}

// imageLauncher runs browsers.json's image entries: in Docker containers, or
// in Kubernetes pods (-kubernetes).
type imageLauncher interface {
	launcher.Launcher
	// Prepare checks the backend and removes what an earlier run left.
	Prepare(ctx context.Context)
	// Watch follows the backend's health and sweeps until ctx ends.
	Watch(ctx context.Context)
	// SweepAll removes every browser of this instance.
	SweepAll(ctx context.Context) int
}

// kubeClient is the Kubernetes API client of -kubeconfig, or else of the
// pod's service account in a cluster, $KUBECONFIG or ~/.kube/config; and the
// namespace they name.
func kubeClient(path string, qps float64, burst int) (kubernetes.Interface, *rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	var cfg *rest.Config
	if path == "" {
		cfg, _ = rest.InClusterConfig() // nil outside a cluster: the kubeconfig then
	}
	if cfg == nil {
		var err error
		if cfg, err = cc.ClientConfig(); err != nil {
			return nil, nil, "", fmt.Errorf("-kubernetes: no cluster to use (%v); give -kubeconfig, set $KUBECONFIG, or run the hub in the cluster", err)
		}
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	if qps <= 0 || burst <= 0 {
		return nil, nil, "", fmt.Errorf("-kube-qps and -kube-burst must be positive (got %v and %d)", qps, burst)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.UserAgent = "websummoner/" + version
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("-kubernetes: %v", err)
	}
	return client, cfg, ns, nil
}

// serve listens, removes what an earlier run of this instance left, serves until
// SIGTERM or SIGINT, reloads the configuration on SIGHUP, and drains on the way
// out.
func (p *program) serve(sigs <-chan os.Signal) int {
	c, log := p.c, p.log
	// Listen and take the instance's lock before sweeping: a second hub that
	// cannot bind, or shares this one's -instance, must touch nothing.
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		logtag.Event(log, slog.LevelError, "", "INIT_FAILED", fmt.Sprintf("-listen %s: %v", c.listen, err))
		return exitConfig
	}
	defer ln.Close()
	lock, err := httpserver.LockInstance(c.launch.Instance)
	if err != nil {
		logtag.Event(log, slog.LevelError, "", "INIT_FAILED", err)
		return exitConfig
	}
	defer lock.Release()
	for _, s := range c.ignored {
		logtag.Event(log, slog.LevelWarn, "", "FLAG_IGNORED", "-"+s.name, s.why)
	}
	if why := exposure(ln.Addr(), p.auth.Enabled(), c.server.TLSCert != ""); why != "" {
		logtag.Event(log, slog.LevelWarn, "", "INSECURE", why)
	}
	if hs := c.hub.AllowedHosts; hs != nil {
		logtag.Event(log, slog.LevelInfo, "", "HOST_CHECK", "requests must name the hub by an IP address, localhost or *.localhost"+strings.Join(append([]string{""}, hs...), ", "))
	}
	switch h := c.hub.TenantHeader; {
	case h == "":
	case p.auth.Enabled():
		logtag.Event(log, slog.LevelWarn, "", "FLAG_IGNORED", "-tenant-header", "under -htpasswd a request's tenant is its user")
	default:
		// The hub cannot check the header: whoever reaches it directly
		// chooses their tenant, or a new one per request, and its share.
		logtag.Event(log, slog.LevelWarn, "", "INSECURE", "-tenant-header "+h,
			"a request's tenant is what this header says, unchecked: keep the hub reachable only through the front that sets it, or use -htpasswd")
	}
	p.procs.Sweep()
	ctx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	if p.containers != nil {
		p.containers.Prepare(ctx)
		go p.containers.Watch(ctx)
	}
	for _, r := range p.retention {
		go r.Run(ctx) // at once, then every minute; nothing without a bound
	}
	srv := p.server
	logtag.Event(log, slog.LevelInfo, "", "INIT", "websummoner "+version, "listening on "+ln.Addr().String(),
		p.queue.Options().String(), "start-gate "+capacity.ModeFlag{O: &c.gate}.String(), fmt.Sprintf("browsers %v", p.conf.Browsers().Names()), "instance "+c.launch.Instance,
		fmt.Sprintf("GOMAXPROCS %d", runtime.GOMAXPROCS(0)))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	// The warm pool starts browsers only now: after the sweep of an earlier
	// run's, and with SIGINT handled, so a driver does not inherit a
	// SIGINT that a hub started in the background ignores (its stop would
	// wait out -session-delete-timeout).
	p.hub.Start()
	for {
		select {
		case err := <-served:
			logtag.Event(log, slog.LevelError, "", "SERVE_FAILED", err)
			p.sessions.EndAll(session.ReasonShutdown)
			return exitServe
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				p.reload()
				continue
			}
			p.shutdown(sig, sigs, srv)
			return 0
		}
	}
}

func (p *program) reload() {
	took := func(file string, err error) {
		ok := 1.0
		if err != nil {
			ok = 0
		}
		p.reloaded.WithLabelValues(file).Set(ok)
	}
	if p.c.auth.File != "" {
		err := p.auth.Reload()
		if err != nil {
			logtag.Event(p.log, slog.LevelWarn, "", "HTPASSWD_RELOAD_FAILED", err, "keeping the previous users")
		}
		took("htpasswd", err)
	}
	if path := p.c.quotas; path != "" {
		q, err := queue.LoadQuotas(path)
		if err != nil {
			logtag.Event(p.log, slog.LevelWarn, "", "QUOTAS_RELOAD_FAILED", err, "keeping the previous quotas")
		} else {
			p.hub.SetQuotas(q)
			logtag.Event(p.log, slog.LevelInfo, "", "QUOTAS_RELOADED", fmt.Sprintf("tenants %v", q.Names()))
		}
		took("quotas", err)
	}
	err := p.conf.Reload()
	took("browsers.json", err)
	if err != nil {
		logtag.Event(p.log, slog.LevelWarn, "", "CONFIG_RELOAD_FAILED", err, "keeping the previous configuration")
		return
	}
	p.configWarnings()
	logtag.Event(p.log, slog.LevelInfo, "", "CONFIG_RELOADED", fmt.Sprintf("browsers %v", p.conf.Browsers().Names()))
}

// configWarnings logs what browsers.json holds that loads, as under
// Selenoid, but cannot work as written.
func (p *program) configWarnings() {
	for _, w := range p.conf.Warnings() {
		logtag.Event(p.log, slog.LevelWarn, "", "CONFIG_WARNING", w)
	}
}

// retentionSize binds a -*-retention-size flag: a size such as 10g, or 0.
func retentionSize(dst *int64) func(string) error {
	return func(v string) error {
		if v == "0" {
			*dst = 0
			return nil
		}
		n, err := config.ParseMem(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a size such as 10g or 500m (0: no bound)", v)
		}
		*dst = n
		return nil
	}
}

// healthcheck asks the hub on -listen's port, on loopback, for /healthz.
func healthcheck(c *flagConfig, stderr io.Writer) int {
	_, port, err := net.SplitHostPort(c.listen)
	if err != nil {
		fmt.Fprintf(stderr, "websummoner: -listen %s: %v\n", c.listen, err)
		return exitServe
	}
	scheme := "http"
	client := &http.Client{Timeout: 5 * time.Second}
	if c.server.TLSCert != "" {
		// Its own certificate need not name 127.0.0.1: liveness, not identity.
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	}
	resp, err := client.Get(scheme + "://" + net.JoinHostPort("127.0.0.1", port) + "/healthz")
	if err != nil {
		fmt.Fprintln(stderr, "websummoner: unhealthy:", err)
		return exitServe
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(stderr, "websummoner: unhealthy: /healthz answered", resp.Status)
		return exitServe
	}
	return 0
}

// allowedHosts is hub.AllowedHosts for -allowed-hosts flag and -listen
// listen. Unset, a hub on loopback checks Host and any other does not: on
// loopback no client has a reason to call it by another name, and a web page
// in a browser on the same host is the one peer that can (DNS rebinding),
// while a hub on the network is reached by whatever name its users have.
func allowedHosts(flag, listen string, machine []string) ([]string, error) {
	// The name -listen gives (Debian maps the host's own name to 127.0.1.1)
	// and the machine's own names are ones its clients use: a front such as
	// ggr or selenoid-ui passes on the name its own clients gave it.
	own := slices.Clone(machine)
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" && net.ParseIP(h) == nil && !slices.Contains(own, h) {
		own = append(own, h)
	}
	switch flag = strings.TrimSpace(flag); flag {
	case "*":
		return nil, nil
	case "":
		if a, err := net.ResolveTCPAddr("tcp", listen); err == nil && a.IP.IsLoopback() {
			return append([]string{}, own...), nil
		}
		return nil, nil
	}
	names := own
	for n := range strings.SplitSeq(flag, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case n == "*":
			return nil, fmt.Errorf("-allowed-hosts: \"*\" turns the check off and stands alone (got %q)", flag)
		case strings.HasPrefix(n, "*."):
			names = append(names, n[1:]) // the domain and every name under it
		case strings.ContainsAny(n, ":/[]*@ "):
			return nil, fmt.Errorf("-allowed-hosts: %q is not a host name: give names without a port or scheme, comma-separated (\".example.com\" for a domain and every name under it)", n)
		default:
			names = append(names, n)
		}
	}
	return names, nil
}

// machineNames are the names the machine has for itself: its host name (and
// that name's first label), and the first names its /etc/hosts gives
// 127.0.0.1, 127.0.1.1 or ::1. A page could rebind one only by controlling
// how this machine resolves its own names.
func machineNames() []string {
	host, _ := os.Hostname()
	hosts, _ := os.ReadFile("/etc/hosts")
	return ownNames(host, hosts)
}

// maxOwnNames bounds the names taken from /etc/hosts: an ad blocker's
// maps thousands of names to loopback, and each request's Host is compared
// with every name taken.
const maxOwnNames = 16

// ownNames is machineNames' rule on a host name and an /etc/hosts file.
func ownNames(host string, etcHosts []byte) []string {
	// The loopback addresses whose names are the machine's own (Debian
	// gives its host name 127.0.1.1).
	ownAddrs := []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.AddrFrom4([4]byte{127, 0, 1, 1}), netip.IPv6Loopback()}
	var out []string
	add := func(n string) {
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		if n != "" && n != "localhost" && !slices.Contains(out, n) && len(out) < maxOwnNames {
			out = append(out, n)
		}
	}
	add(host)
	if first, _, ok := strings.Cut(host, "."); ok {
		add(first)
	}
	for line := range strings.Lines(string(etcHosts)) {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if ip, err := netip.ParseAddr(f[0]); err == nil && slices.Contains(ownAddrs, ip.Unmap()) {
			for _, n := range f[1:] {
				add(n)
			}
		}
	}
	return out
}

// exposure says what is unsafe about serving on addr: beyond loopback without
// authentication anyone who reaches the port drives every browser and reads
// every session's capabilities; with it but without TLS the passwords cross the
// network in the clear.
func exposure(addr net.Addr, authOn, tlsOn bool) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return ""
	}
	where := "every interface"
	if !tcp.IP.IsUnspecified() {
		where = tcp.IP.String()
	}
	switch {
	case !authOn:
		return fmt.Sprintf("listening on %s (%s) without authentication: whoever reaches this port drives every browser and reads every session's capabilities; set -htpasswd, or -listen 127.0.0.1:4444 behind a proxy that authenticates", addr, where)
	case !tlsOn:
		return fmt.Sprintf("listening on %s (%s) with basic auth but without TLS: passwords cross the network in the clear; set -tls-cert and -tls-key, or terminate TLS in front", addr, where)
	}
	return ""
}

// shutdown drains for -graceful-period (a second SIGTERM or SIGINT cuts it
// short; SIGHUP still reloads), removes every container of this instance and
// stops serving.
func (p *program) shutdown(sig os.Signal, sigs <-chan os.Signal, srv *httpserver.Server) {
	logtag.Event(p.log, slog.LevelInfo, "", "SHUTTING_DOWN", sig, fmt.Sprintf("-graceful-period %v", p.c.gracefulPeriod))
	ctx, cancel := context.WithTimeout(context.Background(), p.c.gracefulPeriod)
	go func() {
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					// A config manager's reload is not a second stop: it
					// ended every live session at once.
					p.reload()
					continue
				}
				logtag.Event(p.log, slog.LevelInfo, "", "DRAIN_CUT_SHORT", sig)
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	p.hub.Drain(ctx)
	cancel()
	_ = p.procs.Close() // the download directories kept for reuse
	if p.containers != nil {
		sctx, scancel := context.WithTimeout(context.Background(), p.c.launch.StopTimeout)
		p.containers.SweepAll(sctx)
		scancel()
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = srv.Shutdown(sctx)
	scancel()
	logtag.Event(p.log, slog.LevelInfo, "", "STOPPED")
}

// processSandbox is -process-sandbox: the local drivers' sandbox, or nil.
// With -htpasswd (more than one user on one host) auto needs one, and the
// hub refuses to start without it rather than let users reach each other.
func processSandbox(mode string, multiUser bool, dial *netns.Dialer) (*process.Sandbox, error) {
	switch mode {
	case "off":
		return nil, nil
	case "on", "auto":
	default:
		return nil, fmt.Errorf("-process-sandbox must be on, off or auto (got %q)", mode)
	}
	if mode == "auto" && !multiUser {
		return nil, nil
	}
	s, err := process.NewSandbox(dial)
	switch {
	case err == nil:
		return s, nil
	case mode == "on":
		return nil, fmt.Errorf("-process-sandbox on: %v", err)
	default:
		return nil, fmt.Errorf("-htpasswd shares this host's local drivers between users, and they must each run in a sandbox of their own, which cannot be had: %v; fix that, run browsers in Docker, or give -process-sandbox off to accept that users can reach each other's browsers", err)
	}
}

// writableDir makes dir if it is missing and checks that the hub can write
// a file in it: a directory that exists but is read-only (a volume mounted
// so, an immutable one) let sessions record or log for their whole length
// and lose the file at their end.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".websummoner-write-check-*")
	if err != nil {
		return fmt.Errorf("the hub cannot write in it: %w", err)
	}
	f.Close()
	return os.Remove(f.Name())
}
