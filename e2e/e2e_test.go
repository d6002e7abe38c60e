// Package e2e drives WebSummoner end to end with real parts: the hub started by the
// README's own command, real chromedriver and Chromium, and Python Selenium.
package e2e

import (
	"github.com/websummoner/websummoner/internal/launcher/process"
	"github.com/websummoner/websummoner/internal/wdstub"

	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// runID names what this run of the tests makes (hub instances, containers,
// Docker networks), so that two runs at once on one machine never take each
// other's: the process id tells runs in one pid namespace apart, the random
// part runs in two (containers sharing the host's Docker engine).
var runID = func() string {
	b := make([]byte, 2)
	rand.Read(b)
	return strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b)
}()

// hubs counts the hubs started by startHub, so that each has an instance of
// its own: a hub's start-up kills what an earlier hub of its instance left.
var hubs atomic.Int32

// clientTimeout bounds every HTTP call the tests make and every client
// process they run: a hang fails the test within minutes, never holds the
// suite until go test's own timeout. It is far above what any call needs,
// queueing included.
const clientTimeout = 5 * time.Minute

func TestMain(m *testing.M) {
	// Every test's plain calls (http.Get, http.Post, http.DefaultClient) go
	// through this client.
	http.DefaultClient.Timeout = clientTimeout
	code := m.Run()
	if buildDir != "" { // requireDocker's build of the hub
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

const python = "/usr/bin/python3" // Debian's, with python3-selenium; not the first python3 on PATH

// requireRealParts skips on a developer machine without Chromium, and fails in CI,
// where .ci/run installs them.
func requireRealParts(t *testing.T) {
	t.Helper()
	var missing []string
	for _, bin := range []string{"chromedriver", "chromium"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if err := exec.Command(python, "-c", "import selenium").Run(); err != nil {
		missing = append(missing, "python3-selenium")
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("missing %v: run scripts/deps.sh (make test does)", missing)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

type hub struct {
	cmd      *exec.Cmd
	url      string
	instance string // -instance: the marker of its drivers' processes
	logs     *lockedBuffer
	done     chan error
	lines    chan string   // every log line, for await
	ended    chan struct{} // closed once the process has been waited for
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startHub runs the README's first command (make run) on a loopback port and
// returns once the hub has logged that it listens.
func startHub(t *testing.T, args ...string) *hub {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	instance := fmt.Sprintf("e2e-%s-%d", runID, hubs.Add(1))
	for i, a := range args {
		if a == "-instance" && i+1 < len(args) {
			instance = args[i+1] // the test's own; the flag given last wins
		}
	}
	// After the hub has been stopped or killed (cleanups run last first): its
	// drivers and browsers run in process groups of their own, so a hub killed
	// by a failed test leaves them; they carry its instance's marker. Tests
	// that check for leftovers do so before this.
	t.Cleanup(func() {
		if left := ourProcesses(instance); len(left) > 0 {
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Logf("killed processes of the hub's sessions that outlived it: %v", left)
		}
		removeInstanceFiles(instance)
	})
	args = append([]string{"-listen", addr, "-instance", instance}, args...)
	cmd := exec.Command("make", "-s", "-C", "..", "run", "ARGS="+strings.Join(args, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so cleanup reaches the hub under make
	h := launch(t, cmd, addr, 3*time.Minute)              // includes building the hub
	h.instance = instance
	return h
}

// removeInstanceFiles removes what a local-driver hub of the instance keeps
// in the temporary directory: its sessions' download directories and
// TMPDIRs. A hub that stops cleanly removes them itself; a killed one leaves
// them, and instance names are unique to a run, so they would pile up. The
// TMPDIR root's name is process.Launcher's: wst- and a hash of the instance.
func removeInstanceFiles(instance string) {
	os.RemoveAll(filepath.Join(os.TempDir(), "websummoner-downloads", instance))
	sum := sha256.Sum256([]byte(instance))
	os.RemoveAll(filepath.Join(os.TempDir(), "wst-"+hex.EncodeToString(sum[:6])))
}

// ourProcesses lists the live processes of a hub instance's sessions: those
// whose marker (process.MarkerEnv, set by the hub in every driver's
// environment and inherited by its browser) names the instance. Browsers
// that other programs run carry no such marker, so they are never counted.
func ourProcesses(instance string) []int {
	return process.MarkedPIDs(func(v string) bool { return strings.HasPrefix(v, instance+"/") })
}

// launch starts a hub command, streams its log lines to h.lines, and returns once
// the hub has logged [INIT].
func launch(t *testing.T, cmd *exec.Cmd, addr string, startup time.Duration) *hub {
	t.Helper()
	pr, pw := io.Pipe()
	h := &hub{cmd: cmd, url: "http://" + addr, logs: &lockedBuffer{}, done: make(chan error, 1), lines: make(chan string, 10000), ended: make(chan struct{})}
	// The buffer first: a line the scanner has seen is then always in h.logs too,
	// even when the hub wrote it before [INIT] and await can no longer see it.
	cmd.Stdout, cmd.Stderr = io.MultiWriter(h.logs, pw), io.MultiWriter(h.logs, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { err := cmd.Wait(); close(h.ended); h.done <- err; pw.Close() }()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case h.lines <- sc.Text():
			default:
			}
		}
		close(h.lines)
		io.Copy(io.Discard, pr)
	}()
	kill := func() {
		if cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		} else {
			cmd.Process.Kill()
		}
	}
	t.Cleanup(func() {
		select {
		case <-h.ended:
		default: // still running: the test failed or did not stop it
			kill()
			<-h.ended
		}
		if t.Failed() {
			t.Logf("hub log:\n%s", h.logs)
		}
	})
	if _, ok := h.awaitWithin(t, "[INIT]", startup); !ok {
		kill()
		t.Fatalf("hub did not start:\n%s", h.logs)
	}
	return h
}

// exited reports whether the hub process has ended (and been waited for).
func (h *hub) exited() bool {
	select {
	case <-h.ended:
		return true
	default:
		return false
	}
}

// await returns the first log line from now on that contains tag.
func (h *hub) await(t *testing.T, tag string) string {
	t.Helper()
	line, ok := h.awaitWithin(t, tag, time.Minute)
	if !ok {
		t.Fatalf("hub logged no %s", tag)
	}
	return line
}

func (h *hub) awaitWithin(t *testing.T, tag string, d time.Duration) (string, bool) {
	timeout := time.After(d)
	for {
		select {
		case line, open := <-h.lines:
			if !open {
				return "", false
			}
			if strings.Contains(line, tag) {
				return line, true
			}
		case <-timeout:
			return "", false
		}
	}
}

// hubPID finds the hub under make: make runs scripts/run-hub.sh, which execs it.
func (h *hub) hubPID(t *testing.T) int {
	t.Helper()
	pid := h.cmd.Process.Pid
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(data)) {
		child, _ := strconv.Atoi(f)
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", child)); strings.HasSuffix(exe, "/bin/websummoner") {
			return child
		}
	}
	t.Fatalf("no websummoner process under make (pid %d): children %q", pid, data)
	return 0
}

// stop sends SIGTERM to the hub, as an operator would, and expects it (and so
// make) to exit 0.
func (h *hub) stop(t *testing.T) {
	t.Helper()
	syscall.Kill(h.hubPID(t), syscall.SIGTERM)
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("hub exit after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("hub did not stop on SIGTERM")
	}
}

// settled waits until the hub holds no slot, queues and starts nothing, and
// returns /status then. A DELETE is answered as soon as the driver has quit;
// the teardown (browser processes, the container) finishes after, holding the
// slot until it is done — so a slot-free hub is one whose teardowns are over.
func (h *hub) settled(t *testing.T) map[string]any {
	t.Helper()
	var st map[string]any
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st = h.getJSON(t, "/status"); st["used"] == 0.0 && st["queued"] == 0.0 && st["pending"] == 0.0 {
			return st
		}
	}
	return st
}

func (h *hub) getJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	resp, err := http.Get(h.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// metric reads one sample from /metrics.
func (h *hub) metric(t *testing.T, sample string) float64 {
	t.Helper()
	resp, err := http.Get(h.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics", sample)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func pageServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, wdstub.TestPage)
	}))
	t.Cleanup(srv.Close)
	return srv
}

type clientResult struct {
	Session string  `json:"session"`
	Title   string  `json:"title"`
	Text    string  `json:"text"`
	Created float64 `json:"created"`
	PNG     int     `json:"png"`
	// Window is the maximized window's size, WxH, or why maximizing or
	// minimizing failed.
	Window string `json:"window"`
}

func runClient(hubURL, page, shot string, hold time.Duration) (clientResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "testdata/client.py", hubURL+"/wd/hub", page, shot, fmt.Sprint(hold.Seconds())).CombinedOutput()
	var r clientResult
	if err != nil {
		return r, fmt.Errorf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return r, fmt.Errorf("client output %q: %v", out, err)
	}
	return r, nil
}

func checkResult(t *testing.T, r clientResult, shot string) {
	t.Helper()
	if r.Title != "WebSummoner e2e" || r.Text != "Hello from 127.0.0.1" || r.PNG < 100 {
		t.Errorf("client saw %+v", r)
	}
	if strings.HasPrefix(r.Window, "failed") {
		t.Errorf("maximizing and minimizing the window: %s", r.Window)
	}
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n")) {
		t.Errorf("screenshot %s is not a PNG (%v)", shot, err)
	}
}

// Real Chromium through the hub at -limit 2: one Python client, then four
// at once on two slots — the limit holds and the queue is first in, first
// out, shown by clients that hold their sessions until told, not by timing —,
// then -no-wait while full. Afterwards no process of the hub's sessions is
// left: found by the marker the hub puts on them, so browsers other programs
// run on this machine are not counted.
func TestRealChromiumThroughHub(t *testing.T) {
	requireRealParts(t)
	// -log-level debug: the queue logs [QUEUED] for each request that waits.
	h := startHub(t, "-limit", "2", "-start-gate", "off", "-log-level", "debug") // this test is about the queue; the gate has its own
	page := pageServer(t)
	dir := t.TempDir()

	t.Run("one client", func(t *testing.T) {
		shot := filepath.Join(dir, "one.png")
		r, err := runClient(h.url, page.URL, shot, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, r, shot)
	})

	t.Run("four clients on two slots", func(t *testing.T) {
		admittedBefore := h.metric(t, `websummoner_queue_wait_seconds_count`)
		shot := func(i int) string { return filepath.Join(dir, fmt.Sprintf("c%d.png", i)) }
		// Clients 0 and 1 take both slots and hold them until told to go on.
		c := make([]*heldClient, 4)
		for i := range 2 {
			c[i] = startHeldClient(t, h.url, page.URL, shot(i))
			if _, ok := c[i].created(t); !ok {
				t.Fatalf("client %d made no session on a free slot", i)
			}
		}
		// Clients 2 and 3, one after the other, must each wait in the queue: a
		// session for either now would be a third at once.
		for _, i := range []int{2, 3} {
			c[i] = startHeldClient(t, h.url, page.URL, shot(i))
			h.awaitOr(t, "[QUEUED]", c[i], fmt.Sprintf("client %d got a session while both slots were held", i))
		}
		if st := h.getJSON(t, "/status"); st["used"] != 2.0 || st["queued"] != 2.0 {
			t.Fatalf("with two sessions held and two queued, /status says %v", st)
		}
		// Each session that ends hands its slot to the oldest waiter: client 2
		// first (client 3 must not get a session then), then client 3.
		results := make([]clientResult, 4)
		results[0] = c[0].finish(t)
		c[2].createdFirst(t, c[3])
		if st := h.getJSON(t, "/status"); st["used"] != 2.0 || st["queued"] != 1.0 {
			t.Fatalf("after one slot changed hands, /status says %v", st)
		}
		results[1] = c[1].finish(t)
		if _, ok := c[3].created(t); !ok {
			t.Fatal("client 3 made no session after client 1 ended")
		}
		results[2], results[3] = c[2].finish(t), c[3].finish(t)
		for i, r := range results {
			checkResult(t, r, shot(i))
		}
		if admitted := h.metric(t, `websummoner_queue_wait_seconds_count`) - admittedBefore; admitted != 4 {
			t.Fatalf("the queue admitted %v requests, want the 4 clients'", admitted)
		}
	})

	t.Run("no-wait while full", func(t *testing.T) {
		var ids []string
		for range 2 {
			resp, err := http.Post(h.url+"/wd/hub/session", "application/json", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`))
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Value struct {
					SessionID string `json:"sessionId"`
				} `json:"value"`
			}
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if resp.StatusCode != 200 || v.Value.SessionID == "" {
				t.Fatalf("create: %d", resp.StatusCode)
			}
			ids = append(ids, v.Value.SessionID)
		}
		// The leftover check at the end proves something only if the scan
		// finds live sessions' processes: a driver and a browser each.
		if live := ourProcesses(h.instance); len(live) < 4 {
			t.Fatalf("two live sessions, yet only %v carry the instance's marker", live)
		}
		req, _ := http.NewRequest("POST", h.url+"/wd/hub/session", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`))
		req.Header.Set("X-Selenoid-No-Wait", "")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Value struct{ Error, Message string } `json:"value"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || ra < 1 || ra > 60 || e.Value.Error != "session not created" || e.Value.Message == "" {
			t.Fatalf("no-wait while full: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), e.Value)
		}
		for _, id := range ids {
			req, _ := http.NewRequest("DELETE", h.url+"/wd/hub/session/"+id, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("delete %s: %v %v", id, err, resp)
			}
			resp.Body.Close()
		}
	})

	st := h.settled(t)
	if st["used"] != 0.0 || st["queued"] != 0.0 || st["pending"] != 0.0 {
		t.Fatalf("after the clients: %v", st)
	}
	// A slot is held until its session's teardown is over, so a settled hub
	// has no session processes left.
	if left := ourProcesses(h.instance); len(left) != 0 {
		t.Fatalf("processes of the hub's sessions outlived them: %v", left)
	}
	h.stop(t)
}

// heldClient is testdata/client.py run with "wait": it creates its session,
// says so, and goes on (loads the page, quits) only when told. It is started
// without waiting for its session, which may be queued.
type heldClient struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its output, closed at its end
}

func startHeldClient(t *testing.T, hubURL, page, shot string) *heldClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	c := &heldClient{cmd: exec.CommandContext(ctx, python, "testdata/client.py", hubURL+"/wd/hub", page, shot, "0", "wait"), lines: make(chan string, 16)}
	c.stdin, _ = c.cmd.StdinPipe()
	stdout, _ := c.cmd.StdoutPipe()
	c.cmd.Stderr = os.Stderr
	if err := c.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() { // a failed test's client must not outlive it
		cancel()
		c.cmd.Wait()
	})
	return c
}

// created waits for the client's line saying it has its session.
func (c *heldClient) created(t *testing.T) (string, bool) {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		return line, ok
	case <-time.After(clientTimeout):
		t.Fatal("a client neither made its session nor ended")
		return "", false
	}
}

// createdFirst waits until c or other has its session, and fails if other
// was first.
func (c *heldClient) createdFirst(t *testing.T, other *heldClient) {
	t.Helper()
	select {
	case _, ok := <-c.lines:
		if !ok {
			t.Fatal("the oldest waiting client ended without a session")
		}
	case line := <-other.lines:
		t.Fatalf("a later waiter got the free slot before the oldest (%q)", line)
	case <-time.After(clientTimeout):
		t.Fatal("the oldest waiting client got no session after a slot was freed")
	}
}

// finish lets the client go on and returns its result, once it has quit.
func (c *heldClient) finish(t *testing.T) clientResult {
	t.Helper()
	fmt.Fprintln(c.stdin, "go")
	var last string
	for line := range c.lines { // ends at the client's exit, or its timeout's kill
		last = line
	}
	var r clientResult
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("client: %v %s", err, last)
	}
	if err := json.Unmarshal([]byte(last), &r); err != nil {
		t.Fatalf("client output %q: %v", last, err)
	}
	return r
}

// awaitOr waits for a hub log line containing tag, and fails if client c
// says it has its session first.
func (h *hub) awaitOr(t *testing.T, tag string, c *heldClient, failure string) {
	t.Helper()
	timeout := time.After(clientTimeout)
	for {
		select {
		case line, open := <-h.lines:
			if !open {
				t.Fatalf("the hub ended before it logged %s", tag)
			}
			if strings.Contains(line, tag) {
				return
			}
		case line, ok := <-c.lines:
			if ok {
				t.Fatalf("%s (%q)", failure, line)
			}
			t.Fatalf("a client ended before the hub logged %s", tag)
		case <-timeout:
			t.Fatalf("hub logged no %s", tag)
		}
	}
}
