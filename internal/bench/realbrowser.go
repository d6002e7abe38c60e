package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrNoBrowser says that Chromium or chromedriver is not installed, so the
// realbrowser scenario cannot run here.
var ErrNoBrowser = errors.New("chromium and chromedriver are not both on PATH (Debian: apt-get install chromium chromium-driver, or scripts/deps.sh)")

// BrowserTools finds Chromium and chromedriver on PATH.
func BrowserTools() (chromium, chromedriver string, err error) {
	chromium, err1 := exec.LookPath("chromium")
	chromedriver, err2 := exec.LookPath("chromedriver")
	if err1 != nil || err2 != nil {
		return "", "", ErrNoBrowser
	}
	return chromium, chromedriver, nil
}

// RealBrowserOptions are the realbrowser scenario's settings.
type RealBrowserOptions struct {
	// Selenoid is the path of a Selenoid binary built by hand; empty leaves
	// Selenoid out and its columns read "not run".
	Selenoid string
	// Commands is how many commands each target runs in the measured rounds
	// (a multiple of the four commands; 0: 480, or 40 with Env.Short).
	Commands int
}

// rbCommand is one of the four WebDriver commands the scenario repeats, with
// what its answer's value must be.
type rbCommand struct {
	name, method, path, body string
	check                    func(value json.RawMessage) bool
}

// minCPUTicks is the fewest 10 ms ticks of /proc/PID/stat that the CPU
// target is judged on: at 20 a tick is 5% of the figure.
const minCPUTicks = 20

// rbTitle is the title of the scenario's page.
const rbTitle = "wsbench"

// rbPage is the page every session shows: a data: URL, so that no server of
// the tool's own is on the commands' path.
var rbPage = "data:text/html;charset=utf-8," + url.PathEscape(`<!doctype html><title>`+rbTitle+`</title><p id="wsbench">a paragraph</p>`)

var rbCommands = []rbCommand{
	{"findElement", "POST", "/element", `{"using":"css selector","value":"#wsbench"}`,
		func(v json.RawMessage) bool { return bytes.Contains(v, []byte("element-6066-11e4-a52e-4f735466cecf")) }},
	{"title", "GET", "/title", "",
		func(v json.RawMessage) bool { return string(v) == strconv.Quote(rbTitle) }},
	{"executeScript", "POST", "/execute/sync", `{"script":"return 1","args":[]}`,
		func(v json.RawMessage) bool { return string(v) == "1" }},
	{"currentUrl", "GET", "/url", "",
		func(v json.RawMessage) bool { return bytes.HasPrefix(v, []byte(`"data:`)) }},
}

// rbCaps are the capabilities every target's session is created with: the
// same headless Chromium, whichever way the commands take.
const rbCaps = `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":["--headless","--no-sandbox","--disable-gpu","--disable-dev-shm-usage","--disable-background-networking","--disable-component-update","--disable-sync"]}}}}`

// rbTarget is one way to the browser — straight to chromedriver, through the
// hub, through Selenoid — on one keep-alive connection of its own.
type rbTarget struct {
	name string
	base string // WebDriver's root: http://127.0.0.1:port[/wd/hub]
	c    *http.Client
	// dials counts the connections the client opened: one keep-alive
	// connection carries every measured command, or the figures are not
	// what they claim.
	dials atomic.Int64
	id    string
	// pid is the process between the client and chromedriver (0: none),
	// whose own CPU is counted.
	pid int
	rbPath
}

// rbPath is what the measured rounds gathered on one target; the pure part
// the result is made of (realBrowserResult).
type rbPath struct {
	name   string
	run    bool
	lat    []time.Duration
	byKind map[string][]time.Duration
	// cpuTicks is the process's own CPU (utime+stime of /proc/PID/stat) over
	// the measured rounds, in seconds, and schedNs the same from its
	// threads' schedstat, in ns: the first is counted in 10 ms ticks, the
	// second exactly. -1: no process in between.
	cpu     float64
	schedNs float64
	// runs is how many times the process's threads were put on a CPU over
	// the measured rounds (schedstat; -1: no process in between): the
	// wake-ups that, more than the work, make a proxy's CPU per command.
	runs float64
	// idleNsPerS is the process's own CPU while no command ran, ns a
	// second (exact).
	idleNsPerS float64
}

func newTarget(name, base string, pid int) *rbTarget {
	t := &rbTarget{name: name, base: base, pid: pid}
	t.rbPath = rbPath{name: name, run: true, byKind: map[string][]time.Duration{}, cpu: -1, schedNs: -1, runs: -1}
	d := &net.Dialer{Timeout: 10 * time.Second}
	t.c = &http.Client{Transport: &http.Transport{
		// One connection, kept alive: every command after the first rides
		// the one the session was created on, as a WebDriver client's do.
		MaxIdleConns: 1, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, IdleConnTimeout: 10 * time.Minute,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			t.dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}}
	return t
}

// call sends one WebDriver request and returns the answer's value, and how
// long the request took until its body was read.
func (t *rbTarget) call(ctx context.Context, method, path, body string) (json.RawMessage, time.Duration, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, rd)
	if err != nil {
		return nil, 0, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	s := time.Now()
	resp, err := t.c.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	b, err := io.ReadAll(resp.Body)
	took := time.Since(s)
	resp.Body.Close()
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != 200 {
		return nil, 0, fmt.Errorf("%s %s: status %d: %.300s", method, path, resp.StatusCode, b)
	}
	var out struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, 0, fmt.Errorf("%s %s: the answer is not WebDriver's JSON: %.300s", method, path, b)
	}
	return out.Value, took, nil
}

// open creates the target's session and shows the page.
func (t *rbTarget) open(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	v, _, err := t.call(cctx, "POST", "/session", rbCaps)
	if err != nil {
		return fmt.Errorf("creating the session: %w", err)
	}
	var s struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(v, &s); err != nil || s.SessionID == "" {
		return fmt.Errorf("creating the session: no sessionId in %.300s", v)
	}
	t.id = s.SessionID
	if _, _, err := t.call(cctx, "POST", "/session/"+t.id+"/url", fmt.Sprintf(`{"url":%q}`, rbPage)); err != nil {
		return fmt.Errorf("opening the page: %w", err)
	}
	return nil
}

// command runs one of the four commands and, if measured, keeps its time.
func (t *rbTarget) command(ctx context.Context, c rbCommand, measured bool) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, took, err := t.call(cctx, c.method, "/session/"+t.id+c.path, c.body)
	if err != nil {
		return err
	}
	if !c.check(v) {
		return fmt.Errorf("%s answered %.200s", c.name, v)
	}
	if measured {
		t.lat = append(t.lat, took)
		t.byKind[c.name] = append(t.byKind[c.name], took)
	}
	return nil
}

// close ends the target's session, if it has one.
func (t *rbTarget) close() {
	if t.id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.call(ctx, "DELETE", "/session/"+t.id, "")
	t.id = ""
	t.c.CloseIdleConnections()
}

// roundOrder is the order the targets take their turns in round i: rotated
// each round, so that no target always follows the same one (whose work may
// still be winding down on the two cores) or always comes first.
func roundOrder(n, i int) []int {
	order := make([]int, n)
	for k := range order {
		order[k] = (i + k) % n
	}
	return order
}

// RealBrowser measures the four commands (findElement, title, executeScript,
// currentUrl) on one local headless Chromium session per target — straight
// to chromedriver, through a bare httputil.ReverseProxy, through the hub, and
// through Selenoid when opt.Selenoid names its binary — each target on one
// keep-alive connection, in interleaved rounds, so that the machine's drift
// weighs on every target alike. It reports each target's p50 and p99 and the
// proxies' own CPU per command (their children, chromedriver and Chromium,
// are not counted), and every process it started, and what they started, is
// ended before it returns.
func (e *Env) RealBrowser(ctx context.Context, opt RealBrowserOptions) (r *Result, err error) {
	_, chromedriver, err := BrowserTools()
	if err != nil {
		return nil, err
	}
	n := opt.Commands
	if n == 0 {
		n = 480
		if e.Short {
			n = 40
		}
	}
	if n < len(rbCommands) || n%len(rbCommands) != 0 {
		return nil, fmt.Errorf("realbrowser: %d commands per target: want a positive multiple of %d (the four commands each round)", n, len(rbCommands))
	}
	if opt.Selenoid != "" {
		if st, err := os.Stat(opt.Selenoid); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("realbrowser: -selenoid %q is not an executable file (build Selenoid from its source by hand and name its binary)", opt.Selenoid)
		}
	}
	// Chromium's helpers leave their parents (crashpad's handler forks
	// twice): as the tool's own orphans they are found and ended below,
	// by pid, not left to init.
	stopAdopting, err := adoptOrphans()
	if err != nil {
		return nil, fmt.Errorf("realbrowser: %w", err)
	}
	var procs []*proc
	var groups []int
	var targets []*rbTarget
	defer func() {
		for _, t := range targets {
			t.close()
		}
		for _, p := range procs {
			p.stop()
		}
		for _, g := range groups {
			syscall.Kill(-g, syscall.SIGKILL) // what is left of a group the tool made
		}
		if left := endOrphans(10 * time.Second); left > 0 && err == nil {
			err = fmt.Errorf("realbrowser: %d adopted processes did not end within 10s of SIGKILL", left)
		}
		stopAdopting()
	}()

	// Chromium's temporary files, and what a killed one leaves there, go
	// with the tool's directory. (Under the hub they are the hub's: a
	// session's TMPDIR of its own.)
	tmp := filepath.Join(e.Dir, "t")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	// A chromedriver in a process group of its own, with its Chromium, so
	// that what it leaves is ended with the group.
	startDriver := func(what string) (*proc, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cmd := command(chromedriver, "--port="+strconv.Itoa(port))
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		cmd.SysProcAttr.Setpgid = true
		p, err := e.startWith(ctx, cmd, port, "started successfully")
		if err != nil {
			return nil, fmt.Errorf("realbrowser: starting chromedriver %s: %w", what, err)
		}
		procs, groups = append(procs, p), append(groups, p.pid())
		return p, nil
	}
	direct, err := startDriver("directly")
	if err != nil {
		return nil, err
	}
	directT := newTarget("chromedriver, direct", direct.url, 0)
	targets = append(targets, directT)

	// The standard library's floor: a bare httputil.ReverseProxy process (the
	// tool's binary, ReverseProxyEnv) in front of a chromedriver of its own,
	// as the hub and Selenoid each have theirs.
	fdriver, err := startDriver("for the bare ReverseProxy")
	if err != nil {
		return nil, err
	}
	rport, err := freePort()
	if err != nil {
		return nil, err
	}
	// The hub's environment (WSBENCH_HUB_ENV), as the relay has it: a
	// GOMAXPROCS tried on the hub is tried on its floor too.
	rp, err := e.start(ctx, e.Self, nil, rport, "reverse proxy listening",
		append(hubEnv(), fmt.Sprintf("%s=%d=%s", ReverseProxyEnv, rport, strings.TrimPrefix(fdriver.url, "http://")))...)
	if err != nil {
		return nil, fmt.Errorf("realbrowser: starting the bare ReverseProxy: %w", err)
	}
	procs = append(procs, rp)
	floor := newTarget(rbFloor, rp.url, rp.pid())
	targets = append(targets, floor)

	// The hub, its chrome entry the same chromedriver (no --allowed-ips,
	// which would have it listen beyond loopback), unsandboxed as the
	// direct one is.
	conf := fmt.Sprintf(`{"chrome": {"default": "local", "versions": {"local": {"image": [%q], "path": "/"}}}}`, chromedriver)
	// A short -instance: a session's TMPDIR is under the instance's name,
	// and Chromium refuses to start (its SingletonSocket's path over the 107
	// bytes a Unix socket's name may have) under the long one startHub gives.
	hub, err := e.startHub(ctx, conf, "-process-sandbox", "off", "-instance", fmt.Sprintf("rb%d", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("realbrowser: starting the hub: %w", err)
	}
	procs = append(procs, hub)
	hubT := newTarget("hub", hub.url+"/wd/hub", hub.pid())
	targets = append(targets, hubT)

	sel := &rbTarget{rbPath: rbPath{name: "Selenoid", cpu: -1, schedNs: -1, runs: -1}}
	if opt.Selenoid != "" {
		s, err := e.startSelenoid(ctx, opt.Selenoid, chromedriver, tmp)
		if err != nil {
			return nil, fmt.Errorf("realbrowser: starting Selenoid (%s): %w", opt.Selenoid, err)
		}
		procs, groups = append(procs, s), append(groups, s.pid())
		sel = newTarget("Selenoid", s.url+"/wd/hub", s.pid())
		targets = append(targets, sel)
	}
	for _, t := range targets {
		if err := t.open(ctx); err != nil {
			return nil, fmt.Errorf("realbrowser: %s: %w", t.name, err)
		}
	}
	rounds := n / len(rbCommands)
	round := func(i int, measured bool) error {
		for _, k := range roundOrder(len(targets), i) {
			t := targets[k]
			for _, c := range rbCommands {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err := t.command(ctx, c, measured); err != nil {
					return fmt.Errorf("realbrowser: %s, round %d: %w", t.name, i, err)
				}
			}
		}
		return nil
	}
	// Two rounds unmeasured: the first commands of a session pay for
	// Chromium's and the processes' first use of each path.
	for i := range 2 {
		if err := round(i, false); err != nil {
			return nil, err
		}
	}
	type cpuAt struct {
		stat    float64
		threads map[int]threadStat
	}
	read := func() (map[*rbTarget]cpuAt, error) {
		m := map[*rbTarget]cpuAt{}
		for _, t := range targets {
			if t.pid == 0 {
				continue
			}
			s, err := ownCPU(t.pid)
			if err != nil {
				return nil, fmt.Errorf("realbrowser: %s's CPU: %w", t.name, err)
			}
			th, err := threadsRuntime(t.pid)
			if err != nil {
				return nil, fmt.Errorf("realbrowser: %s's CPU: %w", t.name, err)
			}
			m[t] = cpuAt{s, th}
		}
		return m, nil
	}
	dials0 := make([]int64, len(targets))
	for i, t := range targets {
		dials0[i] = t.dials.Load()
	}
	before, err := read()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	for i := range rounds {
		if err := round(i, true); err != nil {
			return nil, err
		}
	}
	measured := time.Since(t0)
	after, err := read()
	if err != nil {
		return nil, err
	}
	// What the processes use doing nothing, over a while as idle as the
	// rounds were long for each: the figures above include that much of it,
	// and it tells a cost per command from a cost per second.
	idleFor := 3 * time.Second
	if e.Short {
		idleFor = 500 * time.Millisecond
	}
	select {
	case <-time.After(idleFor):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	idle, err := read()
	if err != nil {
		return nil, err
	}
	for i, t := range targets {
		if d := t.dials.Load() - dials0[i]; d != 0 {
			return nil, fmt.Errorf("realbrowser: %s: the client opened %d new connections during the measured rounds: the keep-alive connection was closed, so the figures would include connection set-ups", t.name, d)
		}
		if b, ok := before[t]; ok {
			t.cpu = after[t].stat - b.stat
			d := runtimeSince(b.threads, after[t].threads)
			t.schedNs, t.runs = float64(d.run), float64(d.runs)
			t.idleNsPerS = float64(runtimeSince(after[t].threads, idle[t].threads).run) / idleFor.Seconds()
		}
	}
	paths := []rbPath{directT.rbPath, hubT.rbPath, sel.rbPath, floor.rbPath}
	r = realBrowserResult(paths, n)
	r.Figures["measured_s"] = measured.Seconds()
	return r, nil
}

// startSelenoid runs Selenoid in its local-driver mode (-disable-docker), on
// loopback only, with a browsers.json whose chrome entry is chromedriver: the
// same binary the other targets use, which Selenoid runs with --port=N on
// localhost. Selenoid is put in a process group of its own, which its
// chromedriver and Chromium stay in, so that what it leaves is ended with the
// group.
func (e *Env) startSelenoid(ctx context.Context, bin, chromedriver, tmp string) (*proc, error) {
	conf := filepath.Join(e.Dir, "selenoid-browsers.json")
	// Selenoid runs a driver with the entry's env alone (not its own): the
	// browser gets the PATH and HOME the tool has, and the tool's TMPDIR.
	env, _ := json.Marshal([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + tmp})
	browsers := fmt.Sprintf(`{"chrome": {"default": "local", "versions": {"local": {"image": [%q], "port": "", "path": "/", "env": %s}}}}`, chromedriver, env)
	if err := os.WriteFile(conf, []byte(browsers), 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := command(bin, "-disable-docker", "-conf", conf, "-listen", fmt.Sprintf("127.0.0.1:%d", port),
		"-limit", "2", "-graceful-period", "1s", "-timeout", "10m", "-service-startup-timeout", "60s", "-session-attempt-timeout", "60s")
	cmd.SysProcAttr.Setpgid = true
	// Selenoid says it listens before it does: wait for its /status too.
	p, err := e.startWith(ctx, cmd, port, "Listening on")
	if err != nil {
		return nil, err
	}
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(p.url + "/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			syscall.Kill(-p.pid(), syscall.SIGKILL)
			return nil, fmt.Errorf("/status did not answer 200 within 20s of its start (last: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rbFloor is the name of the path through a bare httputil.ReverseProxy.
const rbFloor = "httputil.ReverseProxy alone"

// rbKeys are the figures' key for each path's name.
var rbKeys = map[string]string{"chromedriver, direct": "direct", rbFloor: "reverseproxy", "hub": "hub", "Selenoid": "selenoid"}

// realBrowserResult is the scenario's table, figures and targets from what
// the rounds measured: paths are chromedriver direct, the hub, Selenoid and,
// if given, the bare ReverseProxy (run false: not run), each with latencies
// and own CPU.
func realBrowserResult(paths []rbPath, perTarget int) *Result {
	direct, hub, sel := paths[0], paths[1], paths[2]
	floor := rbPath{name: rbFloor, cpu: -1, schedNs: -1, runs: -1}
	if len(paths) > 3 {
		floor = paths[3]
	}
	r := &Result{Scenario: "realbrowser", Figures: map[string]float64{"commands_per_target": float64(perTarget)}, Header: realBrowserHeader}
	for _, p := range []*rbPath{&direct, &hub, &sel, &floor} {
		sortDurations(p.lat)
	}
	p50 := func(p rbPath) float64 { return float64(percentile(p.lat, 50)) / 1e6 }
	p99 := func(p rbPath) float64 { return float64(percentile(p.lat, 99)) / 1e6 }
	perCmd := func(p rbPath, sec float64) float64 { return sec / float64(max(len(p.lat), 1)) * 1e6 }
	var kinds, idle, runs []string
	for _, p := range []rbPath{direct, floor, hub, sel} {
		key := rbKeys[p.name]
		if !p.run {
			continue
		}
		r.Figures[key+"_commands"] = float64(len(p.lat))
		r.Figures[key+"_p50_ms"], r.Figures[key+"_p99_ms"] = p50(p), p99(p)
		if p.cpu >= 0 {
			r.Figures[key+"_cpu_us_per_cmd"] = perCmd(p, p.cpu)
			r.Figures[key+"_sched_cpu_us_per_cmd"] = perCmd(p, p.schedNs/1e9)
			r.Figures[key+"_idle_cpu_ms_per_s"] = p.idleNsPerS / 1e6
			if p.runs >= 0 {
				r.Figures[key+"_thread_runs_per_cmd"] = p.runs / float64(max(len(p.lat), 1))
				runs = append(runs, fmt.Sprintf("%s %.1f", p.name, r.Figures[key+"_thread_runs_per_cmd"]))
			}
			idle = append(idle, fmt.Sprintf("%s %.2f", p.name, p.idleNsPerS/1e6))
		}
		var ks []string
		for _, c := range rbCommands {
			l := append([]time.Duration(nil), p.byKind[c.name]...)
			sortDurations(l)
			v := float64(percentile(l, 50)) / 1e6
			r.Figures[key+"_"+c.name+"_p50_ms"] = v
			ks = append(ks, fmt.Sprintf("%.3f", v))
		}
		kinds = append(kinds, fmt.Sprintf("%s %s", p.name, strings.Join(ks, " / ")))
	}
	r.Rows = realBrowserRows(r.Figures)
	hd := p50(hub) / p50(direct)
	r.Figures["hub_over_direct_p50"] = hd
	r.target("hub p50 over chromedriver's own (direct) p50", hd, 1.05, "×")
	if sel.run {
		hs := p50(hub) / p50(sel)
		r.Figures["hub_over_selenoid_p50"] = hs
		r.target("hub p50 over Selenoid's p50", hs, 1.0, "×")
		// /proc/PID/stat counts in 10 ms ticks: with fewer than minCPUTicks
		// on either side (a -short run) its ratio is mostly rounding, and a
		// target "met" by a process that used 0 ticks would say nothing, so
		// the threads' exact schedstat figures judge it then.
		ratio, counter := perCmd(hub, hub.cpu)/max(perCmd(sel, sel.cpu), 1e-9), "utime+stime of /proc/PID/stat"
		if min(hub.cpu, sel.cpu)*userHZ < minCPUTicks {
			ratio, counter = hub.schedNs/max(sel.schedNs, 1), fmt.Sprintf("the threads' schedstat, as /proc/PID/stat had fewer than %d ticks", minCPUTicks)
		}
		r.Figures["hub_over_selenoid_cpu"] = ratio
		r.target("hub's own CPU per command over Selenoid's", ratio, 0.75, "×")
		r.Notes = append(r.Notes, fmt.Sprintf("the CPU target is judged on %s; own CPU µs per command counted exactly (the threads' schedstat): hub %.0f, Selenoid %.0f (%.3f×)",
			counter, perCmd(hub, hub.schedNs/1e9), perCmd(sel, sel.schedNs/1e9), hub.schedNs/max(sel.schedNs, 1)))
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("the hub's own CPU µs per command counted exactly (the threads' schedstat): %.0f", perCmd(hub, hub.schedNs/1e9)))
		r.Notes = append(r.Notes, "Selenoid not run: -selenoid PATH names a Selenoid binary built from its source by hand; its two targets are not judged without it")
	}
	if floor.run {
		// Information, not a target: what the hub's own work adds over the
		// standard library's bare proxy, which has the same wake-ups per
		// command and none of the hub's work.
		r.Figures["hub_over_reverseproxy_p50"] = p50(hub) / p50(floor)
		r.Figures["hub_over_reverseproxy_cpu"] = hub.schedNs / max(floor.schedNs, 1)
		r.Notes = append(r.Notes, fmt.Sprintf("the hub over a bare httputil.ReverseProxy (the standard library's floor, no target): p50 %.3f×, own CPU %.3f× (exact); the bare proxy's p50 over direct %.3f×",
			r.Figures["hub_over_reverseproxy_p50"], r.Figures["hub_over_reverseproxy_cpu"], p50(floor)/p50(direct)))
	}
	r.Notes = append(r.Notes, "own CPU ms a second while no command ran (exact): "+strings.Join(idle, "; "))
	if len(runs) > 0 {
		// Each is a thread woken (or preempted and resumed): with two or more
		// CPUs, Go's scheduler wakes a spare thread for nearly every goroutine
		// hand-off, and these, not the proxies' work, are most of their CPU.
		r.Notes = append(r.Notes, "times a thread of the process was put on a CPU, per command (schedstat): "+strings.Join(runs, "; "))
	}
	r.Notes = append(r.Notes, "p50 ms per command (findElement / title / executeScript / currentUrl): "+strings.Join(kinds, "; "))
	r.Notes = append(r.Notes, fmt.Sprintf("each target: one headless Chromium session through the same chromedriver, one keep-alive connection, %d commands in %d interleaved rounds (order rotated), after 2 unmeasured rounds", perTarget, perTarget/len(rbCommands)))
	return r
}

// realBrowserHeader is the realbrowser table's header.
var realBrowserHeader = []string{"path", "commands", "p50 ms", "p99 ms", "p50 / direct", "own CPU µs/command (ticks; exact)", "thread runs/command"}

// realBrowserRows is the realbrowser table, from the result's figures alone
// (so that results.jsonl holds all it needs): a path without figures reads
// "not run" throughout.
func realBrowserRows(f map[string]float64) [][]string {
	var rows [][]string
	for _, name := range []string{"chromedriver, direct", rbFloor, "hub", "Selenoid"} {
		p := struct{ name, key string }{name, rbKeys[name]}
		n, ok := f[p.key+"_commands"]
		if !ok {
			rows = append(rows, []string{p.name, "not run", "not run", "not run", "not run", "not run", "not run"})
			continue
		}
		row := []string{p.name, fmt.Sprintf("%.0f", n), fmt.Sprintf("%.3f", f[p.key+"_p50_ms"]), fmt.Sprintf("%.3f", f[p.key+"_p99_ms"]),
			fmt.Sprintf("%.3f", f[p.key+"_p50_ms"]/f["direct_p50_ms"]), "— (none between)", "—"}
		if cpu, ok := f[p.key+"_cpu_us_per_cmd"]; ok {
			row[5] = fmt.Sprintf("%.0f (exact %.0f)", cpu, f[p.key+"_sched_cpu_us_per_cmd"])
		}
		if runs, ok := f[p.key+"_thread_runs_per_cmd"]; ok {
			row[6] = fmt.Sprintf("%.1f", runs)
		}
		rows = append(rows, row)
	}
	return rows
}
