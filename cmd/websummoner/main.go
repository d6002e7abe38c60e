// Command websummoner is a Selenium-compatible browser grid hub: a drop-in for
// Selenoid's flags, browsers.json and endpoints, with a queue that says when the
// grid is jammed. This file binds flags to each component's Options and wires
// them; the behaviour lives in internal/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/websummoner/websummoner/internal/capacity"
	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/hub"
	"github.com/websummoner/websummoner/internal/launcher/docker"
	"github.com/websummoner/websummoner/internal/launcher/process"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/session"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// flags is every command-line setting, before it is bound into Options.
type flags struct {
	listen, conf, logOutputDir, instance, logLevel string
	network, mem, cpu, containerAddress, startGate string
	queueMax                                       int
	privileged                                     bool
	sweepInterval                                  time.Duration
	limit, retryCount                              int
	timeout, maxTimeout, startupTimeout            time.Duration
	attemptTimeout, deleteTimeout, gracefulPeriod  time.Duration
	maxLifetime, queueTimeout, congestionTimeout   time.Duration
	disableDocker, disableQueue, captureLogs       bool
	showVersion                                    bool
	set                                            map[string]bool
}

// ignoredSelenoidFlags are Selenoid flags accepted so that its command lines work
// unchanged; each is ignored with a warning that says why (docs/flags.md).
var ignoredSelenoidFlags = map[string]string{
	"log-conf":              "container log drivers are not configurable yet",
	"video-output-dir":      "video recording is not supported",
	"video-recorder-image":  "video recording is not supported",
	"enable-file-upload":    "file upload is proxied to the driver as any other command",
	"save-all-logs":         "use -log-output-dir, which keeps every driver log",
	"cgroup-parent":         "not supported",
	"disable-privileged":    "containers are unprivileged by default already",
	"max-timeout-per-quota": "quotas are not supported",
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{set: map[string]bool{}}
	fs := flag.NewFlagSet("websummoner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	fs.StringVar(&f.listen, "listen", ":4444", "Network address to accept connections on")
	fs.StringVar(&f.conf, "conf", "config/browsers.json", "Browsers configuration file (Selenoid's browsers.json format)")
	fs.IntVar(&f.limit, "limit", queue.DefaultLimit, "Simultaneous sessions (slots); at least 1")
	fs.DurationVar(&f.timeout, "timeout", 60*time.Second, "Session idle timeout: a session with no command for this long ends")
	fs.DurationVar(&f.maxTimeout, "max-timeout", time.Hour, "Maximum idle timeout a client may ask for with sessionTimeout")
	fs.DurationVar(&f.startupTimeout, "service-startup-timeout", 30*time.Second, "How long a browser's driver may take to answer after it is started")
	fs.DurationVar(&f.attemptTimeout, "session-attempt-timeout", 30*time.Second, "How long the driver's new-session call may take, per attempt")
	fs.DurationVar(&f.deleteTimeout, "session-delete-timeout", 30*time.Second, "How long deleting a session and stopping its browser may take before it is killed")
	fs.IntVar(&f.retryCount, "retry-count", 1, "Attempts to start a browser for one new-session request")
	fs.DurationVar(&f.gracefulPeriod, "graceful-period", 300*time.Second, "On SIGTERM, how long live sessions may run on before they are ended")
	fs.DurationVar(&f.maxLifetime, "max-session-lifetime", 0, "End any session this long after it started, busy or not (0 = never)")
	fs.DurationVar(&f.queueTimeout, "queue-timeout", 0, "Keeping-up wait budget of a queued request; derives the fast threshold and saturated budget (0 = wait until the client gives up)")
	fs.DurationVar(&f.congestionTimeout, "queue-congestion-timeout", 0, "Saturated wait budget, used as given (default -queue-timeout/10, at least 1s; 0 = refuse at once when saturated)")
	fs.BoolVar(&f.disableDocker, "disable-docker", false, "Run browsers as local driver processes (image = command line) and never connect to Docker")
	fs.BoolVar(&f.disableQueue, "disable-queue", false, "Refuse new sessions at once when all slots are busy instead of queueing")
	fs.BoolVar(&f.captureLogs, "capture-driver-logs", false, "Copy each driver's output into the hub's log")
	fs.StringVar(&f.logOutputDir, "log-output-dir", "", "Keep each driver's output in this directory as <session-id>.log")
	fs.StringVar(&f.instance, "instance", "websummoner-"+host, "Name of this hub instance; what an earlier run of the same name left running is removed at start-up")
	fs.StringVar(&f.logLevel, "log-level", "info", "Log level: debug, info, warn or error")
	fs.BoolVar(&f.showVersion, "version", false, "Print the version and exit")
	fs.StringVar(&f.startGate, "start-gate", "adaptive", "Concurrent browser starts: \"adaptive\" (driven by start outcomes, latency and engine health, up to -limit), a fixed number, or \"off\" (every admitted request starts at once, as Selenoid)")
	fs.IntVar(&f.queueMax, "queue-max", 0, "Most requests that may wait at once; more are refused with 429 (0 = unbounded)")
	fs.StringVar(&f.network, "container-network", "default", "Docker network for browser containers")
	fs.BoolVar(&f.privileged, "privileged", false, "Run browser containers privileged (Selenoid's default; off here)")
	fs.StringVar(&f.mem, "mem", "", "Default memory limit of a browser container, e.g. 512m or 1g (browsers.json \"mem\" wins)")
	fs.StringVar(&f.cpu, "cpu", "", "Default CPU limit of a browser container, e.g. 0.5 or 2.0 (browsers.json \"cpu\" wins)")
	fs.StringVar(&f.containerAddress, "container-address", "published", "How the hub reaches a container's driver: \"published\" (a port published on 127.0.0.1; hub on the host) or \"name\" (the container's name on -container-network; hub in a container on that network)")
	fs.DurationVar(&f.sweepInterval, "sweep-interval", 30*time.Second, "How often containers with no live session are removed")
	ignored := map[string]*string{}
	for name, why := range ignoredSelenoidFlags {
		ignored[name] = fs.String(name, "", "Ignored (Selenoid compatibility): "+why)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: every setting is a -flag", fs.Arg(0))
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"timeout", f.timeout}, {"max-timeout", f.maxTimeout}, {"service-startup-timeout", f.startupTimeout},
		{"session-attempt-timeout", f.attemptTimeout}, {"session-delete-timeout", f.deleteTimeout},
		{"graceful-period", f.gracefulPeriod}, {"max-session-lifetime", f.maxLifetime}} {
		if d.v < 0 {
			return nil, fmt.Errorf("-%s must be 0 or a positive duration such as 30s (got %v)", d.name, d.v)
		}
	}
	for _, name := range []string{"service-startup-timeout", "session-attempt-timeout", "session-delete-timeout"} {
		if f.set[name] && map[string]time.Duration{"service-startup-timeout": f.startupTimeout, "session-attempt-timeout": f.attemptTimeout, "session-delete-timeout": f.deleteTimeout}[name] == 0 {
			return nil, fmt.Errorf("-%s must be a positive duration such as 30s", name)
		}
	}
	if f.retryCount < 1 {
		return nil, fmt.Errorf("-retry-count must be at least 1 (got %d)", f.retryCount)
	}
	if f.instance == "" || strings.ContainsAny(f.instance, "/= ") {
		return nil, fmt.Errorf("-instance must be a non-empty name without '/', '=' or spaces (got %q)", f.instance)
	}
	if _, err := f.gateOptions(); err != nil {
		return nil, err
	}
	for name := range ignored {
		if f.set[name] {
			f.set["ignored:"+name] = true
		}
	}
	return f, nil
}

func (f *flags) gateOptions() (capacity.Options, error) {
	o := capacity.Options{Limit: f.limit}
	switch f.startGate {
	case "adaptive":
		o.Mode = capacity.Adaptive
	case "off":
		o.Mode = capacity.Off
	default:
		n, err := strconv.Atoi(f.startGate)
		if err != nil || n < 1 || n > f.limit {
			return o, fmt.Errorf("-start-gate must be \"adaptive\", \"off\" or a number from 1 to -limit %d (got %q)", f.limit, f.startGate)
		}
		o.Mode, o.Fixed = capacity.Fixed, n
	}
	return o, nil
}

func (f *flags) queueOptions() queue.Options {
	return queue.Options{
		MaxWaiting:           f.queueMax,
		Limit:                f.limit,
		Timeout:              f.queueTimeout,
		CongestionTimeout:    f.congestionTimeout,
		CongestionTimeoutSet: f.set["queue-congestion-timeout"],
		Disabled:             f.disableQueue,
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return 2
	}
	if f.showVersion {
		fmt.Fprintln(stdout, "websummoner", version)
		return 0
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "websummoner: -log-level must be debug, info, warn or error (got %q)\n", f.logLevel)
		return 2
	}
	log := slog.New(logtag.NewHandler(stderr, level))
	for name, why := range ignoredSelenoidFlags {
		if f.set["ignored:"+name] {
			logtag.Event(log, slog.LevelWarn, "", "FLAG_IGNORED", "-"+name, why)
		}
	}
	qopts, err := f.queueOptions().Resolve()
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return 2
	}
	conf, err := config.Load(f.conf, !f.disableDocker)
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return 2
	}
	if f.logOutputDir != "" {
		if err := os.MkdirAll(f.logOutputDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "websummoner: -log-output-dir %s: %v\n", f.logOutputDir, err)
			return 2
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gopts, err := f.gateOptions()
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return 2
	}
	gate, err := capacity.New(gopts, log, reg)
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return 2
	}
	qopts.Gate = gate
	q, err := queue.New(qopts, log, reg)
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return 2
	}
	sessions, err := session.New(session.Options{StopTimeout: f.deleteTimeout, MaxLifetime: f.maxLifetime}, log, reg)
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return 1
	}
	procs := process.New(process.Options{
		StartupTimeout: f.startupTimeout,
		StopTimeout:    f.deleteTimeout,
		Instance:       f.instance,
		CaptureLogs:    f.captureLogs,
		LogDir:         f.logOutputDir,
	}, log)
	procs.Sweep()
	launchers := hub.Launchers{Process: procs}
	ctx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	var containers *docker.Launcher
	if !f.disableDocker {
		engine, err := docker.NewEngine()
		if err != nil {
			fmt.Fprintln(stderr, "websummoner: Docker client:", err, "(check DOCKER_HOST, or run with -disable-docker)")
			return 2
		}
		containers, err = docker.New(docker.Options{
			StartupTimeout: f.startupTimeout,
			StopTimeout:    f.deleteTimeout,
			Instance:       f.instance,
			Network:        f.network,
			Privileged:     f.privileged,
			Mem:            f.mem,
			CPU:            f.cpu,
			Address:        docker.Address(f.containerAddress),
			SweepInterval:  f.sweepInterval,
			OnHealth:       gate.SetHealthy,
		}, engine, log, reg)
		if err != nil {
			fmt.Fprintln(stderr, "websummoner:", err)
			return 2
		}
		go containers.Run(ctx)
		launchers.Docker = containers
	}
	h, err := hub.New(hub.Options{
		IdleTimeout:           f.timeout,
		MaxTimeout:            f.maxTimeout,
		SessionAttemptTimeout: f.attemptTimeout,
		SessionDeleteTimeout:  f.deleteTimeout,
		RetryCount:            f.retryCount,
		Version:               version,
		Metrics:               promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Gate:                  func() any { return gate.Stats() },
	}, q, conf, launchers, sessions, log, reg)
	if err != nil {
		fmt.Fprintln(stderr, "websummoner:", err)
		return 1
	}

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		fmt.Fprintf(stderr, "websummoner: -listen %s: %v\n", f.listen, err)
		return 2
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	logtag.Event(log, slog.LevelInfo, "", "INIT", "websummoner "+version, "listening on "+ln.Addr().String(),
		qopts.String(), "start-gate "+f.startGate, fmt.Sprintf("browsers %v", conf.Browsers().Names()), "instance "+f.instance)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	for {
		select {
		case err := <-served:
			logtag.Event(log, slog.LevelError, "", "SERVE_FAILED", err)
			sessions.EndAll(session.ReasonShutdown)
			return 1
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if err := conf.Reload(); err != nil {
					logtag.Event(log, slog.LevelWarn, "", "CONFIG_RELOAD_FAILED", err, "keeping the previous configuration")
				} else {
					logtag.Event(log, slog.LevelInfo, "", "CONFIG_RELOADED", fmt.Sprintf("browsers %v", conf.Browsers().Names()))
				}
				continue
			}
			logtag.Event(log, slog.LevelInfo, "", "SHUTTING_DOWN", sig, fmt.Sprintf("-graceful-period %v", f.gracefulPeriod))
			ctx, cancel := context.WithTimeout(context.Background(), f.gracefulPeriod)
			go func() { // a second signal cuts the grace short
				select {
				case <-sigs:
					cancel()
				case <-ctx.Done():
				}
			}()
			h.Drain(ctx)
			cancel()
			if containers != nil {
				sctx, scancel := context.WithTimeout(context.Background(), f.deleteTimeout)
				containers.SweepAll(sctx)
				scancel()
			}
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = srv.Shutdown(sctx)
			scancel()
			logtag.Event(log, slog.LevelInfo, "", "STOPPED")
			return 0
		}
	}
}
