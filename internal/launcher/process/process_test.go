package process

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/launcher/launchertest"
	"github.com/websummoner/websummoner/internal/logtest"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// These tests run real processes: the repository's stub WebDriver, built once.
var stub string

// runID makes this run's launcher instances its own: a launcher kills (Sweep)
// every process carrying its instance's marker, so two runs of these tests at
// once on one machine must never share an instance. The process id tells runs
// in one pid namespace apart, the random part runs in two.
var runID = func() string {
	b := make([]byte, 2)
	rand.Read(b)
	return strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b)
}()

// instanceFor is the test's instance name made this run's.
func instanceFor(name string) string { return name + "-" + runID }

func TestMain(m *testing.M) {
	if os.Getenv(egressDriverEnv) != "" { // in a sandbox, for TestSandboxEgress
		os.Exit(egressDriver())
	}
	// Every plain HTTP call of these tests (http.Get) is bounded, so that a
	// driver that hangs fails its test instead of holding the suite.
	http.DefaultClient.Timeout = time.Minute
	dir, err := os.MkdirTemp("", "wdstub")
	if err != nil {
		panic(err)
	}
	stub = filepath.Join(dir, "wdstub")
	if out, err := exec.Command("go", "build", "-o", stub, "github.com/websummoner/websummoner/cmd/wdstub").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("building wdstub: %v\n%s", err, out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newLauncher(t testing.TB, opts Options) *Launcher {
	if opts.StartupTimeout == 0 {
		opts.StartupTimeout = 10 * time.Second
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 2 * time.Second
	}
	if opts.Instance == "" {
		opts.Instance = instanceFor("test-" + t.Name())
	}
	return closeAtEnd(t, New(opts, nil))
}

// closeAtEnd closes the launcher when the test ends, as the hub does at
// shutdown, and checks that the instance's directories (downloads, the
// sessions' TMPDIRs) are gone then: run names are unique, so any left would
// pile up run after run. Registered at creation, it runs after the test's own
// deferred Stops, whether it passed or not.
func closeAtEnd(tb testing.TB, l *Launcher) *Launcher {
	tb.Cleanup(func() {
		l.Close()
		for _, dir := range []string{l.downloadRoot(), l.tempRoot()} {
			if _, err := os.Stat(dir); err == nil {
				os.RemoveAll(dir)
				tb.Errorf("%s left after the launcher's Close", dir)
			}
		}
	})
	return l
}

// The shared start-policy table, on real driver processes.
func TestEnvPrecedence(t *testing.T) {
	l := newLauncher(t, Options{})
	launchertest.RunEnvCases(t, false, func(c launchertest.EnvCase) (launcher.Instance, error) {
		r := req()
		r.Browser.Env, r.Browser.ClientEnv, r.Options = c.Operator, c.ClientEnv, c.Options
		return l.Start(context.Background(), r)
	})
}

// A client's LD_PRELOAD never reaches the driver, even past the hub's check:
// shown with a real shared object that would write a file from inside it.
func TestLoaderVariableNeverReachesDriver(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		// CI installs gcc (scripts/deps.sh test): a skip there would hide that
		// this check never ran.
		if os.Getenv("CI") != "" {
			t.Fatal("no gcc in CI, where scripts/deps.sh test installs it:", err)
		}
		t.Skip("no gcc to build the shared object (scripts/deps.sh test installs it):", err)
	}
	dir := t.TempDir()
	mark := filepath.Join(dir, "ran")
	src := filepath.Join(dir, "evil.c")
	so := filepath.Join(dir, "evil.so")
	code := fmt.Sprintf(`#include <stdio.h>
__attribute__((constructor)) static void evil(void) { FILE *f = fopen(%q, "w"); if (f) fclose(f); }`, mark)
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	l := newLauncher(t, Options{})
	r := req()
	r.Browser.ClientEnv = []string{"LD_PRELOAD"} // even an operator cannot open it
	r.Options.Env = []string{"LD_PRELOAD=" + so}
	inst, err := l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	inst.Stop(context.Background())
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the client's shared object ran inside the driver")
	}
	// The same object set by the operator does run: the test can tell.
	r.Browser.Env = []string{"LD_PRELOAD=" + so}
	if inst, err = l.Start(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	inst.Stop(context.Background())
	if _, err := os.Stat(mark); err != nil {
		t.Fatal("the operator's LD_PRELOAD did not run: this test proves nothing")
	}
}

func req(args ...string) launcher.Request {
	return launcher.Request{ID: "t", Browser: config.Resolved{Name: "stub", Version: "1", Browser: &config.Browser{
		Image: config.Image{Command: append([]string{stub}, args...)}, Path: "/"}}}
}

func pidOf(t *testing.T, inst launcher.Instance) int {
	t.Helper()
	pid, _ := launchertest.DriverStatus(t, inst)
	return pid
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && stat[i+2] != 'Z'
}

func TestStartAnswerStop(t *testing.T) {
	l := newLauncher(t, Options{})
	inst, err := l.Start(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	pid := pidOf(t, inst)
	if !alive(pid) {
		t.Fatal("driver not running")
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatal("driver outlived Stop")
	}
	select {
	case <-inst.Exited():
		t.Fatal("a stopped instance reported an exit of its own")
	default:
	}
	if len(l.ports) != 0 {
		t.Fatalf("ports still reserved: %v", l.ports)
	}
	inst.Stop(context.Background()) // twice is harmless
}

// Thirty-two drivers started at once each get their own port and each answers
// for itself: the pid behind every URL is the pid of its own process.
func TestConcurrentStartsNeverSharePorts(t *testing.T) {
	l := newLauncher(t, Options{})
	const n = 32
	insts := make([]launcher.Instance, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { insts[i], errs[i] = l.Start(context.Background(), req()) })
	}
	wg.Wait()
	hosts := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		h := insts[i].Endpoints().Driver.Host
		if hosts[h] {
			t.Fatalf("two drivers on %s", h)
		}
		hosts[h] = true
		if pid, own := pidOf(t, insts[i]), insts[i].(*instance).pid; pid != own {
			t.Fatalf("%s answered by pid %d, not its own driver %d", h, pid, own)
		}
	}
	for _, inst := range insts {
		wg.Go(func() { inst.Stop(context.Background()) })
	}
	wg.Wait()
}

// A driver that exits during start (as one that lost its port does) is noticed at
// once, not after the start-up timeout, and the start is retried on a new port.
func TestExitDuringStartRetriesOnNewPort(t *testing.T) {
	flagFile := filepath.Join(t.TempDir(), "exit-once")
	os.WriteFile(flagFile, nil, 0o644)
	l := newLauncher(t, Options{Options: launcher.Options{StartupTimeout: 20 * time.Second}})
	t0 := time.Now()
	inst, err := l.Start(context.Background(), req("-exit-once", flagFile))
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop(context.Background())
	if took := time.Since(t0); took > 5*time.Second {
		t.Fatalf("retry took %v: the exit was not noticed at once", took)
	}
	if _, err := os.Stat(flagFile); !os.IsNotExist(err) {
		t.Fatal("the first driver did not run")
	}
}

func TestDriverThatAlwaysExits(t *testing.T) {
	l := newLauncher(t, Options{PortAttempts: 2})
	_, err := l.Start(context.Background(), req("-no-such-flag"))
	var se *launcher.StartError
	if !errors.As(err, &se) || se.Phase != launcher.PhaseStartup || !strings.Contains(se.Msg, "exited during start-up") || !strings.Contains(se.Msg, "no-such-flag") {
		t.Fatalf("err = %v", err)
	}
	if len(l.ports) != 0 {
		t.Fatalf("ports leaked: %v", l.ports)
	}
}

func TestMissingCommand(t *testing.T) {
	l := newLauncher(t, Options{})
	r := req()
	r.Browser.Image.Command = []string{"/nonexistent/chromedriver"}
	_, err := l.Start(context.Background(), r)
	var se *launcher.StartError
	if !errors.As(err, &se) || se.Phase != launcher.PhaseStart || !strings.Contains(err.Error(), "/nonexistent/chromedriver") {
		t.Fatalf("err = %v", err)
	}
}

func TestStartupTimeout(t *testing.T) {
	l := newLauncher(t, Options{Options: launcher.Options{StartupTimeout: 300 * time.Millisecond}})
	_, err := l.Start(context.Background(), req("-listen-delay", "1h"))
	if err == nil || !strings.Contains(err.Error(), "within -service-startup-timeout 300ms") {
		t.Fatalf("err = %v", err)
	}
	if pids := MarkedPIDs(func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) }); len(pids) != 0 {
		t.Fatalf("processes left after a timed-out start: %v", pids)
	}
}

func TestClientGoneDuringStart(t *testing.T) {
	l := newLauncher(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := l.Start(ctx, req("-listen-delay", "1h"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if pids := MarkedPIDs(func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) }); len(pids) != 0 {
		t.Fatalf("processes left: %v", pids)
	}
}

// A driver that ignores SIGINT is killed after the stop timeout, and a helper that
// left the process group (setsid, as Chromium's crash handler does) goes with it.
func TestStopKillsStubbornDriverAndOrphans(t *testing.T) {
	l := newLauncher(t, Options{Options: launcher.Options{StopTimeout: 300 * time.Millisecond}})
	inst, err := l.Start(context.Background(), req("-ignore-sigint", "-spawn-orphan"))
	if err != nil {
		t.Fatal(err)
	}
	mine := func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) }
	if pids := MarkedPIDs(mine); len(pids) != 2 {
		t.Fatalf("want the driver and its orphan helper, got %v", pids)
	}
	t0 := time.Now()
	inst.Stop(context.Background())
	if took := time.Since(t0); took < 300*time.Millisecond {
		t.Fatalf("stopped in %v: SIGINT was not ignored?", took)
	}
	if pids := MarkedPIDs(mine); len(pids) != 0 {
		t.Fatalf("left behind: %v", pids)
	}
}

// A driver that dies mid-session is reported through Exited.
func TestExitedReportsCrash(t *testing.T) {
	l := newLauncher(t, Options{})
	inst, err := l.Start(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pidOf(t, inst), syscall.SIGKILL)
	select {
	case <-inst.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("crash not reported")
	}
	if !strings.Contains(inst.ExitReason(), "killed") {
		t.Errorf("reason %q", inst.ExitReason())
	}
	inst.Stop(context.Background())
}

// The start-up sweep removes what an earlier run of the same instance left, and
// nothing of another instance's.
func TestSweep(t *testing.T) {
	old := newLauncher(t, Options{Options: launcher.Options{Instance: instanceFor("sweep-a")}})
	other := newLauncher(t, Options{Options: launcher.Options{Instance: instanceFor("sweep-b")}})
	a, err := old.Start(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	b, err := other.Start(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	if n := newLauncher(t, Options{Options: launcher.Options{Instance: instanceFor("sweep-a")}}).Sweep(); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	select {
	case <-a.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the old instance's driver survived the sweep")
	}
	if !alive(pidOf(t, b)) {
		t.Fatal("the other instance's driver was swept")
	}
	a.Stop(context.Background())
}

// Selenoid's rule: a session's log is kept when it asks (enableLog, as its
// logName) or with -save-all-logs (as <session-id>.log); otherwise not.
func TestDriverLogsToDir(t *testing.T) {
	for _, c := range []struct {
		name    string
		saveAll bool
		opts    webdriver.Options
		file    string // "" = no file
	}{
		{"not asked", false, webdriver.Options{}, ""},
		{"enableLog", false, webdriver.Options{EnableLog: true}, "abc.log"},
		{"enableLog with logName", false, webdriver.Options{EnableLog: true, LogName: "mine.log"}, "mine.log"},
		{"-save-all-logs", true, webdriver.Options{}, "abc.log"},
	} {
		dir := t.TempDir()
		// A launcher of its own, as a hub of its own: two live launchers of
		// one instance would share (and sweep) one set of directories.
		l := newLauncher(t, Options{Options: launcher.Options{LogDir: dir, SaveAllLogs: c.saveAll,
			Instance: instanceFor("test-" + t.Name() + "-" + strings.ReplaceAll(c.name, " ", "-"))}})
		r := req()
		r.Options = c.opts
		inst, err := l.Start(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		inst.SessionCreated("abc", nil)
		inst.Stop(context.Background())
		entries, _ := os.ReadDir(dir)
		if c.file == "" {
			if len(entries) != 0 {
				t.Errorf("%s: files kept: %v", c.name, entries)
			}
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, c.file))
		if err != nil || !strings.Contains(string(data), "wdstub: listening on") || len(entries) != 1 {
			t.Errorf("%s: log %q, %v, files %v", c.name, data, err, entries)
		}
	}
}

// The driver's output can be followed live, from the moment one follows.
func TestFollowDriverOutput(t *testing.T) {
	l := newLauncher(t, Options{})
	inst, err := l.Start(context.Background(), req("-log-requests"))
	if err != nil {
		t.Fatal(err)
	}
	out := &syncWriter{b: &strings.Builder{}}
	done := make(chan error, 1)
	go func() { done <- inst.Endpoints().Log.Follow(context.Background(), out) }()
	for i := 0; !strings.Contains(out.String(), "wdstub: GET /status") && i < 200; i++ {
		// Each request is a line of the driver's output; the first may precede the follower.
		if resp, err := http.Get(inst.Endpoints().Driver.JoinPath("status").String()); err == nil {
			resp.Body.Close()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "wdstub: GET /status") {
		t.Fatalf("followed output %q", out.String())
	}
	inst.Stop(context.Background())
	if err := <-done; err != nil {
		t.Fatalf("follow after the driver ended: %v", err)
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestCaptureDriverLogs(t *testing.T) {
	got, log := logtest.New(100)
	l := closeAtEnd(t, New(Options{Options: launcher.Options{StartupTimeout: 10 * time.Second, StopTimeout: time.Second, Instance: instanceFor("capture")}, CaptureLogs: true}, log))
	inst, err := l.Start(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	// Waited for rather than drained after a close: the output copier may still
	// be sending when Stop gives up on a pipe held by a stray helper.
	got.Wait(t, "[t] [DRIVER_LOG] [wdstub: listening on 127.0.0.1:", 10*time.Second)
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// A helper that left the process group and exits by itself when its driver
// does — Chromium's crash handler, when its browser quits — is a zombie by
// the time Stop looks: its marker can no longer be read, and nothing else
// would ever reap it. Stop reaps it, and so does the next Start, for one
// that exits later still.
func TestStopReapsHelpersThatExitedThemselves(t *testing.T) {
	l := newLauncher(t, Options{})
	for _, end := range []string{"Stop", "the next Start"} {
		inst, err := l.Start(context.Background(), req("-spawn-watcher"))
		if err != nil {
			t.Fatal(err)
		}
		driver := pidOf(t, inst)
		mine := func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) }
		var helper int
		for _, p := range MarkedPIDs(mine) {
			if p != driver {
				helper = p
			}
		}
		if helper == 0 {
			t.Fatal("no helper")
		}
		pidfd, err := unix.PidfdOpen(helper, 0)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Kill(driver, syscall.SIGKILL)
		<-inst.Exited()
		// The helper exits by itself at the end of its input: its pidfd is
		// readable once it has.
		if n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 60_000); n != 1 || err != nil {
			t.Fatalf("the helper did not exit with its driver: %d %v", n, err)
		}
		unix.Close(pidfd)
		if st, ok := statOf(helper); !ok || st.state != 'Z' {
			t.Fatalf("the helper %d is not this process's zombie: %+v %v", helper, st, ok)
		}
		if end == "Stop" {
			if err := inst.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		} else {
			// Before its session's Stop, as for a helper that exits after
			// it: the next Start reaps it.
			next, err := l.Start(context.Background(), req())
			if err != nil {
				t.Fatal(err)
			}
			reaped := !slices.Contains(childrenOf(os.Getpid()), helper)
			next.Stop(context.Background())
			inst.Stop(context.Background())
			if !reaped {
				t.Fatalf("after %s: the helper %d is still this process's zombie", end, helper)
			}
		}
		if slices.Contains(childrenOf(os.Getpid()), helper) {
			t.Fatalf("after %s: the helper %d is still this process's zombie", end, helper)
		}
	}
}

// A helper that outlived its driver (the driver crashed; the helper had left
// the process group with setsid) was reparented to this process, the
// subreaper: Stop finds it among this process's children, kills it and reaps
// it — no orphan and no zombie is left, and no other process was looked at.
func TestStopFindsOrphansOfACrashedDriver(t *testing.T) {
	l := newLauncher(t, Options{})
	inst, err := l.Start(context.Background(), req("-spawn-orphan"))
	if err != nil {
		t.Fatal(err)
	}
	mine := func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) }
	pids := MarkedPIDs(mine)
	if len(pids) != 2 {
		t.Fatalf("want the driver and its helper, got %v", pids)
	}
	driver := pidOf(t, inst)
	syscall.Kill(driver, syscall.SIGKILL)
	<-inst.Exited()
	var helper int
	for _, p := range pids {
		if p != driver {
			helper = p
		}
	}
	if !slices.Contains(childrenOf(os.Getpid()), helper) {
		t.Fatalf("the helper %d was not reparented to this process (children %v): no subreaper?", helper, childrenOf(os.Getpid()))
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := MarkedPIDs(mine); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	if slices.Contains(childrenOf(os.Getpid()), helper) {
		t.Fatalf("helper %d is still this process's child (a zombie not reaped)", helper)
	}
}

// Without a spawner (a seccomp profile refused it) drivers still start, run,
// report their exit and stop, forked from the starting thread; the hub says
// why once, at the first local driver, not at start-up where a Docker-mode hub
// would have nothing to do with it.
func TestStartsWithoutSpawner(t *testing.T) {
	got, log := logtest.New(100)
	l := closeAtEnd(t, New(Options{Options: launcher.Options{StartupTimeout: 10 * time.Second, StopTimeout: time.Second, Instance: instanceFor("nospawner")}}, log))
	l.spawn.stop()
	l.spawn, l.spawnErr = nil, errors.New("unshare(CLONE_FILES): operation not permitted")
	for range 2 {
		inst, err := l.Start(context.Background(), req())
		if err != nil {
			t.Fatal(err)
		}
		if pid := pidOf(t, inst); pid != inst.(*instance).pid {
			t.Fatalf("the driver answering is pid %d, the launcher started %d", pid, inst.(*instance).pid)
		}
		if err := inst.Stop(context.Background()); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}
	crash, err := l.Start(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pidOf(t, crash), syscall.SIGKILL)
	select {
	case <-crash.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("a driver that exited was not noticed")
	}
	if why := crash.ExitReason(); !strings.Contains(why, "signal: killed") {
		t.Fatalf("exit reason %q", why)
	}
	crash.Stop(context.Background())
	var lines []string
	for len(got) > 0 { // everything is logged by now: the starts have returned
		if m := <-got; strings.Contains(m, "[NO_SPAWNER]") {
			lines = append(lines, m)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("NO_SPAWNER logged %d times, want once: %q", len(lines), lines)
	}
}

// An unsandboxed session's TMPDIR, where Chromium makes its Unix sockets, has
// a short path whatever the instance's name (a socket path fits in 107
// bytes), goes with the session, and the launcher leaves no directory of its
// own after Close.
func TestSessionTempIsShortAndGoes(t *testing.T) {
	l := newLauncher(t, Options{Options: launcher.Options{Instance: instanceFor("a-hub-instance-name-as-long-as-an-operator-may-choose-" + strings.Repeat("x", 40))}})
	inst, err := l.Start(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	temp := inst.(*instance).temp
	if sock := filepath.Join(temp, ".org.chromium.Chromium.XXXXXX", "SingletonSocket"); len(sock) > 100 {
		t.Errorf("a socket in the session's TMPDIR %s would be %d bytes long", temp, len(sock))
	}
	// The driver, and the browser it starts, run in it: a file a client
	// names relatively (--log-file=x) is the session's, not the hub's.
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", inst.(*instance).pid)); err != nil || cwd != temp {
		t.Errorf("the driver's working directory is %q (%v), want the session's %s", cwd, err, temp)
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(temp); !os.IsNotExist(err) {
		t.Errorf("the session's TMPDIR %s outlived it: %v", temp, err)
	}
	l.Close()
	for _, dir := range []string{l.tempRoot(), l.downloadRoot()} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s outlived the launcher's Close: %v", dir, err)
		}
	}
}
