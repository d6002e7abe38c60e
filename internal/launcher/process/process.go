// Package process runs each session's driver as a local process (Selenoid's
// -disable-docker mode): a command line from browsers.json plus --port=N, in its
// own process group, stopped with SIGINT and then killed, group and all.
package process

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/websummoner/websummoner/internal/egress"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// MarkerEnv is set in every driver's environment, and so inherited by the browser
// and every helper it spawns, even those that leave the process group (Chromium's
// crash handler calls setsid). Stop and the start-up sweep find leftovers by it.
const MarkerEnv = "WEBSUMMONER_PROCESS"

// Options configure the process launcher. The zero value works.
type Options struct {
	// Options is the start policy shared with the Docker launcher: StopTimeout is
	// how long a driver has to exit after SIGINT before its whole group is
	// killed; processes of an earlier run with the same Instance are killed by
	// Sweep. Zero fields take its defaults.
	launcher.Options
	// CaptureLogs copies each driver's output into the hub's log (-capture-driver-logs).
	CaptureLogs bool
	// DownloadDir is where each session gets a download directory of its own,
	// served by the hub (/download/{id}/). Empty: the system's temporary
	// directory.
	DownloadDir string
	// PortAttempts is how many ports a start tries when its driver exits during
	// start-up (say, "address already in use"); zero means 3.
	PortAttempts int
	// Sandbox, if set, runs every driver in a sandbox of its own (see
	// Sandbox). Nil: drivers run on the host as the hub's user, fit for one
	// user only (docs/security.md).
	Sandbox *Sandbox
}

// Launcher starts local driver processes.
type Launcher struct {
	opts   Options
	log    *slog.Logger
	client *http.Client
	spawn  *spawner // nil: drivers are forked from the starting goroutine's thread
	// spawnErr says why there is no spawner, logged at the first start: a
	// hub that starts no local driver (Docker mode) has nothing to be told.
	spawnErr  error
	spawnNote sync.Once
	// diag asks the kernel who listens on a driver's port; diagNote logs,
	// once, that it cannot say.
	diag     SockDiag
	diagNote sync.Once

	// reserved, when set (tests only), is called with each port reserved,
	// before its driver starts.
	reserved func(port int)

	mu    sync.Mutex
	ports map[int]bool // handed to a live driver of this hub
	spare []string     // empty download directories of ended sessions
}

// New returns a process launcher.
func New(opts Options, logger *slog.Logger) *Launcher {
	opts.Options = opts.Options.WithDefaults()
	if opts.PortAttempts <= 0 {
		opts.PortAttempts = 3
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := becomeSubreaper(); err != nil {
		logtag.Event(logger, slog.LevelWarn, "", "INIT", "cannot become the subreaper of browser helpers: "+err.Error(), "a helper whose parent exits escapes its session's teardown")
	}
	l := &Launcher{
		opts:   opts,
		log:    logger,
		client: opts.ReadyClient(),
		ports:  map[int]bool{},
	}
	if s, err := newSpawner(); err != nil {
		l.spawnErr = err
	} else {
		l.spawn = s
		// The spawner's thread goes when the launcher does; a launcher is
		// unreachable only once every instance it started is.
		runtime.AddCleanup(l, (*spawner).stop, s)
	}
	return l
}

// reservePort returns a loopback port no live driver of this hub holds. Picking a
// free port and closing it is racy by nature; the reservation removes the race
// between this hub's own drivers, and a driver that still loses its port to
// another program exits, or is found not to hold it (checkListener), and Start
// retries. Each search starts at a random port: two hubs on one machine taking
// ports in turn fell into step, each skipping the other's live drivers and
// landing on the port the other was about to take.
func (l *Launcher) reservePort() (int, error) {
	span := portMax - portMin
	start := mrand.IntN(span)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range span {
		port := portMin + (start+i)%span
		if l.ports[port] {
			continue
		}
		// A bind to one given port is a lookup; a bind to port 0 made the
		// kernel search the ephemeral range, and was a sixth of the hub's CPU
		// under churn.
		free, err := bindable(port)
		if err != nil {
			return 0, fmt.Errorf("checking loopback port %d: %w", port, err)
		}
		if !free {
			continue
		}
		l.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port in %d-%d", portMin, portMax-1)
}

// bindable says whether a driver could bind 127.0.0.1:port now, by binding a
// socket there as the driver's own is (SO_REUSEADDR, which Go programs and
// chromedriver set) and closing it unlistened. net.Listen did the same bind
// and added a listen and the poller's registration and removal of the socket,
// more than doubling the check's cost (BenchmarkReservePort). An error is a socket
// that could not be made at all (out of descriptors), not a taken port.
func bindable(port int) (bool, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, os.NewSyscallError("socket", err)
	}
	defer syscall.Close(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return false, os.NewSyscallError("setsockopt", err)
	}
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}) == nil, nil
}

// The drivers' ports: picked at random from a range below Linux's ephemeral
// ports (32768-60999), so a port is seldom reused soon after its driver ended,
// and no outgoing connection of the machine competes for it.
const (
	portMin = 20000
	portMax = 32000
)

func (l *Launcher) freePort(port int) {
	l.mu.Lock()
	delete(l.ports, port)
	l.mu.Unlock()
}

// Start runs the driver's command line with --port=N and waits until it answers.
func (l *Launcher) Start(ctx context.Context, r launcher.Request) (launcher.Instance, error) {
	name := r.Browser.String()
	argv := r.Browser.Image.Command
	if len(argv) == 0 {
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name,
			Msg: fmt.Sprintf("\"image\" %q is a Docker image, but this hub runs local drivers (-disable-docker)", r.Browser.Image.Name)}
	}
	// A helper of an ended session that outlived its Stop is reaped at the
	// next start at the latest.
	reapOrphans()
	ctx, cancel := context.WithTimeout(ctx, l.opts.StartupTimeout)
	defer cancel()
	var lastErr error
	for attempt := 1; attempt <= l.opts.PortAttempts; attempt++ {
		inst, err := l.startOnce(ctx, r, name, argv)
		if err == nil {
			return inst, nil
		}
		lastErr = err
		taken := errors.Is(err, errPortTaken)
		if (!taken && !errors.Is(err, launcher.ErrExited)) || ctx.Err() != nil {
			break
		}
		event := "DRIVER_EXITED_AT_START"
		if taken {
			event = "PORT_TAKEN"
		}
		logtag.Event(l.log, slog.LevelWarn, r.ID, event, name, fmt.Sprintf("attempt %d of %d", attempt, l.opts.PortAttempts), err)
	}
	return nil, lastErr
}

func (l *Launcher) startOnce(ctx context.Context, r launcher.Request, name string, argv []string) (*instance, error) {
	sbx := l.opts.Sandbox
	port := sandboxPort // a loopback of its own: nothing to reserve
	if sbx == nil {
		var err error
		if port, err = l.reservePort(); err != nil {
			return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Msg: err.Error(), Err: err}
		}
		if l.reserved != nil {
			l.reserved(port)
		}
	}
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	inst := &instance{
		l:      l,
		port:   port,
		marker: l.markerPrefix() + hex.EncodeToString(token),
		exited: make(chan struct{}),
		done:   make(chan struct{}),
		endpoints: launcher.Endpoints{
			Driver: &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port), Path: r.Browser.Path},
		},
		tail:    &tailBuffer{max: 4096},
		log:     launcher.NewBroadcast(),
		display: r.Browser.Display,
		rOpts:   r.Options,
	}
	inst.endpoints.Log = inst.log
	downloads, err := l.downloadDir(token)
	if err != nil {
		l.freePort(port)
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err, Msg: "cannot create the session's download directory: " + err.Error()}
	}
	inst.downloads = downloads
	inst.endpoints.Files = &url.URL{Scheme: "file", Path: downloads}
	var sessionEnv []string
	if sbx != nil {
		if err := sbx.prepare(downloads); err != nil {
			inst.discard()
			return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err, Msg: "cannot give the sandbox its download directory: " + err.Error()}
		}
	} else {
		// The browser's profile and uploads go to a directory of the
		// session's, removed with it, not the host's /tmp.
		if inst.temp, err = sessionTemp(l.tempRoot()); err != nil {
			inst.discard()
			return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err, Msg: "cannot create the session's temporary directory: " + err.Error()}
		}
		sessionEnv = []string{"TMPDIR=" + inst.temp}
	}
	if r.Browser.Display {
		// A display entry's browser is a desktop program (MiniBrowser):
		// it saves downloads to its user's XDG download directory, which
		// is made the session's own, served at /download/{id}/.
		xdg, err := xdgDownloads(downloads)
		if err != nil {
			inst.discard()
			return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err, Msg: "cannot point the browser's downloads at the session's directory: " + err.Error()}
		}
		sessionEnv = append(sessionEnv, "XDG_CONFIG_HOME="+xdg)
	}
	if l.spawnErr != nil {
		l.spawnNote.Do(func() {
			logtag.Event(l.log, slog.LevelInfo, r.ID, "NO_SPAWNER", "drivers are started from the hub's own descriptor table: "+l.spawnErr.Error(), "each start slows with the connections the hub holds")
		})
	}
	if r.Browser.Display {
		argv = append(displayCommand(r.Options), argv...)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		inst.discard()
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err,
			Msg: fmt.Sprintf("cannot run driver command %q: %v; install it or fix \"image\" in the -conf file", argv[0], err)}
	}
	req := &spawnReq{
		path: path,
		argv: append(append([]string(nil), argv...), "--port="+strconv.Itoa(port)),
		// The session's environment over the hub's own; exec keeps the last of a name.
		env: append(append(append(os.Environ(), sessionEnv...), launcher.Env(r)...), MarkerEnv+"="+inst.marker),
		// A file the browser is told to write by a relative name (a
		// client's --log-file=x) lands in the session's own directory, not
		// in the hub's working directory.
		dir: inst.temp,
	}
	if sbx != nil {
		req.argv = append(append([]string{sbx.Bwrap}, sbx.args(downloads, path)...), append([]string{path}, req.argv[1:]...)...)
		req.path, req.cred = sbx.Bwrap, sbx.Cred
		req.env = sandboxEnv(append(launcher.Env(r), sessionEnv...), inst.marker)
	}
	said := launcher.NewSaid()
	var out io.Writer = io.MultiWriter(inst.tail, inst.log, said)
	if l.opts.CaptureLogs {
		out = io.MultiWriter(out, &lineLogger{log: l.log, id: r.ID})
	}
	if l.opts.KeepLog(r.Options) {
		f, err := os.CreateTemp(l.opts.LogDir, "driver-*.log")
		if err != nil {
			inst.discard()
			return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err,
				Msg: fmt.Sprintf("cannot create a driver log file in -log-output-dir %s: %v", l.opts.LogDir, err)}
		}
		inst.logFile = f
		out = io.MultiWriter(out, &keptLog{f: f, failed: func(err error) {
			logtag.Event(l.log, slog.LevelWarn, r.ID, "LOG_FAILED", fmt.Sprintf("writing the driver's log in -log-output-dir %s: %v", l.opts.LogDir, err), "the rest of this session's log is not kept")
		}})
	}
	// A pipe, not an io.Writer: the driver writes to it directly, and the
	// driver's exit is noticed when it exits rather than when the last browser
	// helper holding the pipe does.
	pr, pw, err := os.Pipe()
	if err != nil {
		inst.discard()
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err, Msg: "cannot create the driver's output pipe: " + err.Error()}
	}
	wc, err := pw.SyscallConn()
	if err == nil {
		cerr := wc.Control(func(fd uintptr) {
			req.out = int(fd)
			inst.pid, err = l.spawn.fork(req)
		})
		if err == nil {
			err = cerr
		}
	}
	pw.Close()
	if err != nil {
		pr.Close()
		inst.discard()
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err,
			Msg: fmt.Sprintf("cannot run driver command %q: %v", path, err)}
	}
	inst.outDone = make(chan struct{})
	go func() {
		_, _ = io.Copy(out, pr)
		pr.Close()
		inst.log.Close()
		close(inst.outDone)
	}()
	go inst.wait()
	logtag.Event(l.log, slog.LevelDebug, r.ID, "PROCESS_STARTED", name, "pid "+strconv.Itoa(inst.pid), "port "+strconv.Itoa(port))

	listening := func() (bool, bool) { return l.diag.Listening(port) }
	if sbx != nil {
		inst.sandbox, err = sbx.enter(ctx, inst.pid)
		if err == nil {
			// Before the browser can start: it goes out through it.
			if inst.egress, err = sbx.openEgress(ctx, inst.sandbox); err != nil {
				err = &launcher.StartError{Phase: launcher.PhaseStart, Browser: name, Err: err, Engine: true,
					Msg: "cannot serve the sandbox its proxy (its only way out): " + err.Error()}
			}
		}
		if err == nil {
			inst.endpoints.Driver.Host = net.JoinHostPort(inst.sandbox.String(), strconv.Itoa(port))
			inst.endpoints.Proxy = egress.URL()
			listening = func() (bool, bool) { return sbx.listening(ctx, inst.endpoints.Driver.Host) }
		}
	}
	if err == nil {
		err = launcher.WaitListening(ctx, l.client, inst.endpoints.Driver, inst.exited, listening, said)
	}
	if err == nil && sbx == nil {
		err = l.checkListener(r.ID, inst)
	}
	if err == nil {
		return inst, nil
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.StopTimeout)
	defer cancel()
	_ = inst.Stop(stopCtx)
	switch {
	case errors.Is(err, errPortTaken):
		return nil, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: name, Err: errPortTaken, Engine: true,
			Msg: fmt.Sprintf("another program took port %d before driver %q listened on it (another hub on this machine?)", port, argv[0])}
	case errors.Is(err, launcher.ErrExited):
		return nil, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: name, Err: launcher.ErrExited, Engine: true,
			Msg: fmt.Sprintf("driver %q exited during start-up on port %d (%s): %s", argv[0], port, inst.ExitReason(), inst.tail.String())}
	case errors.Is(err, context.DeadlineExceeded):
		return nil, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: name, Err: err, Engine: true,
			Msg: fmt.Sprintf("driver did not answer on 127.0.0.1:%d within -service-startup-timeout %v; raise it if the host is slow", port, l.opts.StartupTimeout)}
	default:
		return nil, err // the client went away: not the host's fault
	}
}

func (l *Launcher) markerPrefix() string { return l.opts.Instance + "/" }

// downloadRoot holds this instance's per-session download directories.
func (l *Launcher) downloadRoot() string {
	root := l.opts.DownloadDir
	if root == "" {
		root = filepath.Join(os.TempDir(), "websummoner-downloads")
	}
	return filepath.Join(root, l.opts.Instance)
}

// tempRoot holds this instance's unsandboxed sessions' TMPDIRs. Its name is
// short whatever the instance's: Chromium puts Unix sockets in its TMPDIR,
// whose paths must fit in 107 bytes.
func (l *Launcher) tempRoot() string {
	sum := sha256.Sum256([]byte(l.opts.Instance))
	return filepath.Join(os.TempDir(), "wst-"+hex.EncodeToString(sum[:6]))
}

// Sweep kills every process left by an earlier run of this hub instance (a hub
// that was SIGKILLed takes its drivers with it, but not the browsers they had
// started). It returns how many it killed.
func (l *Launcher) Sweep() int {
	n, _ := killMarked(func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) })
	_ = os.RemoveAll(l.downloadRoot()) // an earlier run's downloads
	_ = os.RemoveAll(l.tempRoot())
	if n > 0 {
		logtag.Event(l.log, slog.LevelInfo, "", "ORPHANS_REMOVED", fmt.Sprintf("%d processes of an earlier run of instance %q", n, l.opts.Instance))
	}
	return n
}

type instance struct {
	l      *Launcher
	pid    int // the driver's, and its process group's
	port   int
	marker string
	// endpoints has the driver only: a local driver's browser reports its
	// DevTools address itself, in its capabilities.
	endpoints launcher.Endpoints
	tail      *tailBuffer
	log       *launcher.Broadcast // the driver's output, live
	rOpts     webdriver.Options   // the client's options: enableLog, logName
	logFile   *os.File
	logKept   bool // under mu: logFile has its session's name; until then it is removed at the end
	// downloads is the session's own download directory, removed at Stop.
	downloads string
	// temp is an unsandboxed session's TMPDIR, removed at Stop.
	temp string
	// sandbox is the address that stands for the driver's sandbox (invalid:
	// not sandboxed), forgotten at Stop.
	sandbox netip.Addr
	// egress is the sandbox's proxy, closed at Stop.
	egress  *egress.Proxy
	outDone chan struct{} // closed when every writer of the output pipe is gone

	exited   chan struct{} // closed when the driver exits on its own
	done     chan struct{} // closed when the driver process has been reaped
	mu       sync.Mutex
	stopping bool
	reason   string
	stopOnce sync.Once
	stopErr  error
	// display: the driver runs under xvfb-run (a "display" entry), whose
	// Xvfb is given SIGTERM before SIGKILL at the end.
	display bool
}

func (i *instance) wait() {
	reason := waitPid(i.pid)
	i.mu.Lock()
	i.reason = reason
	stopping := i.stopping
	i.mu.Unlock()
	if !stopping {
		close(i.exited)
	}
	close(i.done)
}

func (i *instance) Endpoints() launcher.Endpoints { return i.endpoints }
func (i *instance) Exited() <-chan struct{}       { return i.exited }
func (i *instance) Describe() string {
	return "pid " + strconv.Itoa(i.pid) + " port " + strconv.Itoa(i.port)
}

func (i *instance) ExitReason() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return "driver process ended: " + i.reason
}

// SessionCreated takes the browser's DevTools address from the driver's answer
// (chromedriver's goog:chromeOptions.debuggerAddress, on this host's loopback),
// and names the driver's log file after the session, as Selenoid does.
func (i *instance) SessionCreated(id string, caps json.RawMessage) {
	var c map[string]json.RawMessage
	_ = json.Unmarshal(caps, &c)
	for key, raw := range c {
		var opts struct {
			DebuggerAddress string `json:"debuggerAddress"`
		}
		if !strings.HasSuffix(key, "Options") || json.Unmarshal(raw, &opts) != nil || opts.DebuggerAddress == "" {
			continue
		}
		host, port, err := net.SplitHostPort(opts.DebuggerAddress)
		if ip := net.ParseIP(host); err == nil && (host == "localhost" || ip != nil && ip.IsLoopback()) {
			at := "127.0.0.1"
			if i.sandbox.IsValid() {
				at = i.sandbox.String() // the browser's loopback is its sandbox's
			}
			i.endpoints.DevTools = &url.URL{Scheme: "http", Host: net.JoinHostPort(at, port)}
		}
	}
	if i.logFile == nil {
		return
	}
	want := launcher.LogFile(i.rOpts, id)
	saved, err := launcher.RenameKept(i.logFile.Name(), filepath.Dir(i.logFile.Name()), want, id)
	switch {
	case err != nil:
		logtag.Event(i.l.log, slog.LevelWarn, id, "LOG_FAILED", err)
	case saved != want:
		logtag.Event(i.l.log, slog.LevelWarn, id, "LOG_RENAMED", fmt.Sprintf("%s exists in -log-output-dir; this session's log is %s", want, saved))
	}
	i.mu.Lock()
	i.logKept = saved != "" // the temporary name is gone, or another session may have it now
	i.mu.Unlock()
}

// Stop sends SIGINT to the driver's group, waits up to -session-delete-timeout (or
// until ctx ends) for the driver to exit, then kills the group and every process carrying this instance's marker.
func (i *instance) Stop(ctx context.Context) error {
	i.stopOnce.Do(func() {
		i.mu.Lock()
		i.stopping = true
		i.mu.Unlock()
		pgid := i.pid
		_ = syscall.Kill(-pgid, syscall.SIGINT)
		grace := time.NewTimer(i.l.opts.StopTimeout)
		select {
		case <-i.done:
		case <-ctx.Done():
		case <-grace.C:
		}
		grace.Stop()
		// A display session's group gets SIGTERM and a moment to exit as it
		// would: xvfb-run does not wait for its Xvfb, which removes its
		// /tmp/.X<n>-lock and socket on SIGTERM and leaves them for good
		// on SIGKILL; it is bounded as the driver's own exit is, and ends
		// as soon as the group is gone. Other sessions' browsers are killed
		// at once.
		if i.display {
			termGroup(ctx, pgid, i.l.opts.StopTimeout)
		}
		// The session's processes, found from the driver's tree and this
		// process's children only (it is their subreaper): what else runs on
		// the machine costs nothing here.
		left := reapSession(pgid, i.marker)
		<-i.done
		var errs []error
		if left > 0 {
			errs = append(errs, fmt.Errorf("%d processes of the session survived SIGKILL for 5s", left))
		}
		pipe := time.NewTimer(5 * time.Second)
		select {
		case <-i.outDone:
		case <-pipe.C:
			errs = append(errs, errors.New("a process that left the session's marker still holds its output pipe after 5s"))
		}
		pipe.Stop()
		// The session's helpers that left its process group have exited
		// with the browser by now (the last of them held the output pipe).
		reapOrphans()
		i.l.freePort(i.port)
		i.closeLog()
		if err := i.l.releaseDownloads(i.downloads); err != nil {
			errs = append(errs, fmt.Errorf("removing the download directory: %w", err))
		}
		if err := i.releaseSandbox(); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			i.stopErr = fmt.Errorf("pid %d: %w", pgid, errors.Join(errs...))
		}
	})
	return i.stopErr
}

// discard frees what a start that never ran its driver took.
func (i *instance) discard() {
	i.l.freePort(i.port)
	i.closeLog()
	_ = i.l.releaseDownloads(i.downloads)
	_ = i.releaseSandbox()
}

// releaseSandbox forgets the sandbox's address and removes an unsandboxed
// session's temporary directory, once its processes are gone.
func (i *instance) releaseSandbox() error {
	if i.egress != nil {
		_ = i.egress.Close() // its listener holds the namespace
	}
	if i.sandbox.IsValid() && i.l.opts.Sandbox != nil {
		i.l.opts.Sandbox.Dial.Remove(i.sandbox)
	}
	if i.temp != "" {
		if err := os.RemoveAll(i.temp); err != nil {
			return fmt.Errorf("removing the session's temporary directory: %w", err)
		}
	}
	return nil
}

func (i *instance) closeLog() {
	if i.logFile != nil {
		_ = i.logFile.Close()
		i.mu.Lock()
		kept := i.logKept
		i.mu.Unlock()
		if !kept { // a start abandoned before its session: nothing of it stays
			_ = os.Remove(i.logFile.Name())
		}
	}
}

// killMarked SIGKILLs every process whose MarkerEnv value matches and waits, for
// a bounded time, until they are gone. It returns how many it found and how many
// were still there when it gave up.
func killMarked(match func(string) bool) (found, left int) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := MarkedPIDs(match)
		if len(pids) == 0 {
			return found, 0
		}
		if time.Now().After(deadline) {
			return found, len(pids)
		}
		found = max(found, len(pids))
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond) // the kernel needs a moment to tear them down
	}
}

// MarkedPIDs lists the live processes whose MarkerEnv value matches: the
// drivers of a hub instance and every helper they spawned.
func MarkedPIDs(match func(string) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	key := []byte(MarkerEnv + "=")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, key) {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
				continue // a zombie is already dead; its parent will reap it
			}
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, key); ok && match(string(v)) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// tailBuffer keeps the last max bytes written, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return "no output"
	}
	return "output: " + strings.ReplaceAll(s, "\n", " | ")
}

// lineLogger writes each line of a driver's output as a log line.
type lineLogger struct {
	log     *slog.Logger
	id      string
	mu      sync.Mutex
	partial []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		logtag.Event(w.log, slog.LevelInfo, w.id, "DRIVER_LOG", string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

// DefaultScreen is a "display" entry's screen when the session asks for none.
const DefaultScreen = "1920x1080x24"

// displayCommand runs a driver that needs an X display (WebKit's MiniBrowser)
// on a virtual screen of its own: xvfb-run picks a free display number (-a),
// sizes the screen as the session's screenResolution asks, and ends Xvfb
// when the driver ends; both are in the driver's process group, so a
// session's end stops both.
func displayCommand(o webdriver.Options) []string {
	screen := DefaultScreen
	if w, h, depth, ok := webdriver.ParseScreen(o.ScreenResolution); ok {
		screen = fmt.Sprintf("%dx%dx%d", w, h, depth)
	}
	return []string{"xvfb-run", "-a", "-s", "-screen 0 " + screen}
}

// xdgDownloads writes, in a session's download directory, an XDG
// configuration whose download directory is that directory, and returns
// the configuration's directory (for XDG_CONFIG_HOME). It is a dot
// directory: the downloads' listing shows regular files only.
func xdgDownloads(downloads string) (string, error) {
	dir := filepath.Join(downloads, ".config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	line := fmt.Sprintf("XDG_DOWNLOAD_DIR=%q\n", downloads)
	return dir, os.WriteFile(filepath.Join(dir, "user-dirs.dirs"), []byte(line), 0o644)
}

// keptLog is a driver's log file as a writer that never fails: the copy of
// the driver's output stops at a writer's first error, closing the pipe,
// and the driver's next write then killed it (SIGPIPE). A full
// -log-output-dir ended every local session and start. The first error is
// told to failed; what comes after it is not written.
type keptLog struct {
	f      io.Writer
	failed func(error)
	err    error
}

func (k *keptLog) Write(p []byte) (int, error) {
	if k.err == nil {
		if _, k.err = k.f.Write(p); k.err != nil {
			k.failed(k.err)
		}
	}
	return len(p), nil
}
