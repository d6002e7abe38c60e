// Package bench is WebSummoner's load tool: scenarios that run the real hub
// binary with the stub driver on loopback and report figures as ratios or
// differences against a baseline measured in the same run. Every loop is bounded
// in count and time and sends traffic to 127.0.0.1 only.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Env is what every scenario needs.
type Env struct {
	// Hub and Stub are the websummoner and wdstub binaries.
	Hub, Stub string
	// Self is the load tool's own binary, which the proxy scenario runs
	// again as its byte relay (RelayEnv) and the wakeup scenario as its echo
	// process (EchoEnv); empty leaves the relay row out.
	Self string
	// Short runs each scenario for seconds, as a smoke test.
	Short bool
	// Dir holds the scenarios' files (browsers.json, logs).
	Dir string
	// Log receives progress lines.
	Log io.Writer
}

// Build compiles the hub and the stub into dir.
func Build(ctx context.Context, dir string) (hub, stub string, err error) {
	hub, stub = filepath.Join(dir, "websummoner"), filepath.Join(dir, "wdstub")
	for bin, pkg := range map[string]string{hub: "./cmd/websummoner", stub: "./cmd/wdstub"} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return hub, stub, nil
}

// Result is one scenario's outcome: a table for people and figures for machines.
type Result struct {
	Scenario string             `json:"scenario"`
	Figures  map[string]float64 `json:"figures"`
	Targets  []Target           `json:"targets,omitempty"`
	Notes    []string           `json:"notes,omitempty"`
	Header   []string           `json:"-"`
	Rows     [][]string         `json:"-"`
}

// Target is one of the targets, checked against a figure.
type Target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Unit  string  `json:"unit"`
	// Min marks a target met at or above Limit (others: at or below).
	Min bool `json:"min,omitempty"`
	// Correctness marks a target that does not depend on the machine's speed
	// (an error answer, a leak, an allocation count): missed, it fails the
	// run. Timing targets are reports.
	Correctness bool `json:"correctness,omitempty"`
	Met         bool `json:"met"`
}

func (r *Result) target(name string, value, limit float64, unit string) {
	r.Targets = append(r.Targets, Target{Name: name, Value: value, Limit: limit, Unit: unit, Met: value <= limit})
}

// correct is a correctness target: met when value is at most limit, and a
// miss fails the run.
func (r *Result) correct(name string, value, limit float64, unit string) {
	r.Targets = append(r.Targets, Target{Name: name, Value: value, Limit: limit, Unit: unit, Correctness: true, Met: value <= limit})
}

// CorrectnessMissed is how many of r's correctness targets were missed.
func (r *Result) CorrectnessMissed() int {
	n := 0
	for _, t := range r.Targets {
		if t.Correctness && !t.Met {
			n++
		}
	}
	return n
}

// targetMin is a target that is met at or above min.
func (r *Result) targetMin(name string, value, min float64, unit string) {
	r.Targets = append(r.Targets, Target{Name: name, Value: value, Limit: min, Unit: unit, Min: true, Met: value >= min})
}

// Print writes the table, the targets and one JSON line.
func (r *Result) Print(w io.Writer) {
	fmt.Fprintf(w, "\n== %s\n", r.Scenario)
	widths := make([]int, len(r.Header))
	for i, h := range r.Header {
		widths[i] = len(h)
	}
	for _, row := range r.Rows {
		for i, c := range row {
			widths[i] = max(widths[i], len(c))
		}
	}
	line := func(cells []string) {
		for i, c := range cells {
			fmt.Fprintf(w, "%-*s  ", widths[i], c)
		}
		fmt.Fprintln(w)
	}
	line(r.Header)
	for _, row := range r.Rows {
		line(row)
	}
	for _, t := range r.Targets {
		verdict := "met"
		switch {
		case !t.Met && t.Correctness:
			verdict = "FAILED (a correctness target: the run fails)"
		case !t.Met:
			verdict = "MISSED"
		}
		bound := "≤"
		if t.Min {
			bound = "≥"
		}
		fmt.Fprintf(w, "target %-55s %10.3f %s (%s %.3f): %s\n", t.Name, t.Value, t.Unit, bound, t.Limit, verdict)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	js, _ := json.Marshal(r)
	fmt.Fprintf(w, "%s\n", js)
}

// percentile returns the p-th percentile (0-100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// proc is a child process (the hub or a stub) on a loopback port.
type proc struct {
	cmd    *exec.Cmd
	url    string
	logsMu sync.Mutex
	logs   bytes.Buffer // the hub's warnings and failed sessions, for errors
	done   chan struct{}
	// leftDirs are removed, if empty, once the process has stopped: a hub
	// leaves its instance's two directories behind.
	leftDirs []string
}

// failures are the process's logged failures so far (at most the last 2 KB).
func (p *proc) failures() string {
	p.logsMu.Lock()
	defer p.logsMu.Unlock()
	b := p.logs.Bytes()
	return string(b[max(0, len(b)-2048):])
}

// startHub runs the hub with browsers.json entries for the stub. For
// comparisons, WSBENCH_HUB_ARGS adds flags to every hub the scenarios start
// (after theirs, so they win) and WSBENCH_HUB_ENV sets its environment (both
// split on spaces).
func (e *Env) startHub(ctx context.Context, browsers string, args ...string) (*proc, error) {
	conf := filepath.Join(e.Dir, fmt.Sprintf("browsers-%d.json", time.Now().UnixNano()))
	if err := os.WriteFile(conf, []byte(browsers), 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	all := append([]string{"-disable-docker", "-conf", conf, "-listen", fmt.Sprintf("127.0.0.1:%d", port),
		// An instance of its own (the port is): two hubs run at once in the
		// waiters scenario, and a hub refuses to share its instance.
		"-instance", fmt.Sprintf("wsbench-%d-%d", os.Getpid(), port), "-graceful-period", "1s"}, args...)
	all = append(all, strings.Fields(os.Getenv("WSBENCH_HUB_ARGS"))...)
	p, err := e.start(ctx, e.Hub, all, port, "[INIT]", hubEnv()...)
	if err != nil {
		return nil, err
	}
	// The hub keeps a session's downloads and TMPDIR under its instance's
	// name in $TMPDIR/websummoner-downloads and leaves the two directories
	// there, empty, when it stops: a run would leave two for every hub.
	instance := ""
	for i, a := range all[:len(all)-1] {
		if a == "-instance" {
			instance = all[i+1] // the last one given is the hub's
		}
	}
	for _, d := range []string{instance, instance + ".tmp"} {
		p.leftDirs = append(p.leftDirs, filepath.Join(os.TempDir(), "websummoner-downloads", d))
	}
	return p, nil
}

// hubEnv is WSBENCH_HUB_ENV, split on spaces. The hub's drivers inherit the
// hub's environment, so every driver and proxy the floors start gets it too:
// GOMAXPROCS=1 meant for the hub would otherwise make only the hub's stub
// drivers single-CPU — a third cheaper per command here — and the hub would
// seem to beat the floor by the drivers' difference.
func hubEnv() []string { return strings.Fields(os.Getenv("WSBENCH_HUB_ENV")) }

// stubBrowsers is a browsers.json with the stub as "stub", plus extra entries.
func (e *Env) stubBrowsers(extra ...string) string {
	entries := []string{fmt.Sprintf(`"stub": {"default": "1", "versions": {"1": {"image": [%q], "path": "/"}}}`, e.Stub)}
	entries = append(entries, extra...)
	return "{" + strings.Join(entries, ",\n") + "}"
}

// command is exec.Command for a process the load tool starts (a hub, a stub
// driver, a proxy, a sleeper): the kernel kills it when the tool dies, however
// the tool dies (a SIGKILL, a timeout's SIGTERM), so a run cut short leaves
// nothing running. The signal is tied to the thread that forked, and Go ends
// a thread only under LockOSThread, which the tool does not use.
func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// A driver's browser inherits the driver's output and may outlive it a
	// moment: Wait does not wait on it for longer than this.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (e *Env) start(ctx context.Context, bin string, args []string, port int, ready string, env ...string) (*proc, error) {
	cmd := command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	return e.startWith(ctx, cmd, port, ready)
}

// startWith starts cmd, made by command (and perhaps given a process group of
// its own), and waits until it prints ready: it then serves on 127.0.0.1:port.
func (e *Env) startWith(ctx context.Context, cmd *exec.Cmd, port int, ready string) (*proc, error) {
	bin := cmd.Path
	p := &proc{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { cmd.Wait(); pw.Close(); close(p.done) }()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			if !sent && strings.Contains(sc.Text(), ready) {
				found <- true
				sent = true
			}
			if line := sc.Text(); strings.Contains(line, "FAILED") || strings.Contains(line, " WARN ") {
				p.logsMu.Lock()
				p.logs.WriteString(line + "\n")
				p.logsMu.Unlock()
			}
		}
		if !sent {
			found <- false
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			return nil, fmt.Errorf("%s exited before it was ready", bin)
		}
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, fmt.Errorf("%s not ready within 30s", bin)
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
	return p, nil
}

func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	for _, d := range p.leftDirs {
		os.Remove(d) // only if empty: what is left in it is someone's to see
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// rss is the process's resident set in bytes.
func rss(pid int) float64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(data)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v * 1024
}

// cpuSeconds is the process's user+system CPU time.
func cpuSeconds(pid int) float64 { return statCPU(pid, 11) }

// childrenCPU is the user+system CPU time of pid's children that it has
// reaped (cutime and cstime).
func childrenCPU(pid int) float64 { return statCPU(pid, 13) }

// statCPU is the sum of two clock-tick fields of /proc/pid/stat, the one at
// field (counted from the field after the command's closing parenthesis) and
// the next, in seconds.
func statCPU(pid, field int) float64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f, err := statFields(string(data))
	if err != nil || len(f) < field+2 {
		return 0
	}
	a, _ := strconv.ParseFloat(f[field], 64)
	b, _ := strconv.ParseFloat(f[field+1], 64)
	return (a + b) / userHZ
}

// machineCPU is the CPU time the whole machine has spent busy, every CPU's
// and the kernel's: /proc/stat's first line less idle, iowait and steal
// (another guest's time on this VM's CPUs).
func machineCPU() float64 {
	data, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	t := 0.0
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 7 { // idle, iowait; steal; guest time, counted in user already
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		t += x
	}
	return t / 100 // USER_HZ
}

// hubDrivers lists the driver processes a local-driver hub has started: its
// children, of whichever of its threads forked them.
func hubDrivers(hub int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", hub))
	var pids []int
	for _, t := range tasks {
		data, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(data)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// sumCPU is cpuSeconds summed over pids.
func sumCPU(pids []int) float64 {
	t := 0.0
	for _, p := range pids {
		t += cpuSeconds(p)
	}
	return t
}

// metric reads one sample from the hub's /metrics.
func metric(c *http.Client, base, sample string) float64 {
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func statusField(c *http.Client, base, field string) float64 {
	resp, err := c.Get(base + "/status")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var st map[string]any
	json.NewDecoder(resp.Body).Decode(&st)
	v, _ := st[field].(float64)
	return v
}

// wd is a minimal WebDriver client over one HTTP client.
type wd struct{ c *http.Client }

const stubCaps = `{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`

func (w wd) create(ctx context.Context, base, caps string) (string, int, error) {
	a, err := w.createAnswer(ctx, base, caps)
	if err != nil || a.Status != http.StatusOK {
		return "", a.Status, err
	}
	return a.SessionID, a.Status, nil
}

// newSessionAnswer is what a new-session request was answered.
type newSessionAnswer struct {
	Status     int
	SessionID  string
	RetryAfter string
	// W3C: the body is a W3C answer, a session or an error with its code and
	// message.
	W3C bool
}

func (w wd) createAnswer(ctx context.Context, base, caps string) (newSessionAnswer, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/session", strings.NewReader(caps))
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.c.Do(req)
	if err != nil {
		return newSessionAnswer{}, err
	}
	defer resp.Body.Close()
	var out struct {
		Value struct {
			SessionID string `json:"sessionId"`
			Error     string `json:"error"`
			Message   string `json:"message"`
		} `json:"value"`
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out)
	return newSessionAnswer{Status: resp.StatusCode, SessionID: out.Value.SessionID, RetryAfter: resp.Header.Get("Retry-After"),
		W3C: err == nil && (out.Value.SessionID != "" || out.Value.Error != "" && out.Value.Message != "")}, nil
}

func (w wd) command(base, id string) (int, error) {
	resp, err := w.c.Get(base + "/session/" + id + "/title")
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (w wd) remove(base, id string) {
	req, _ := http.NewRequest("DELETE", base+"/session/"+id, nil)
	if resp, err := w.c.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func pooled(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxIdleConns: conns, IdleConnTimeout: time.Minute}}
}
