// Package e2e drives WebSummoner end to end with real parts: the hub started by the
// README's own command, real chromedriver and Chromium, and Python Selenium.
package e2e

import (
	"github.com/websummoner/websummoner/internal/wdstub"

	"bufio"
	"bytes"
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
	"syscall"
	"testing"
	"time"
)

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
	cmd   *exec.Cmd
	url   string
	logs  *lockedBuffer
	done  chan error
	lines chan string   // every log line, for await
	ended chan struct{} // closed once the process has been waited for
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
	args = append([]string{"-listen", addr, "-instance", "e2e-" + strconv.Itoa(os.Getpid())}, args...)
	cmd := exec.Command("make", "-s", "-C", "..", "run", "ARGS="+strings.Join(args, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so cleanup reaches the hub under make
	return launch(t, cmd, addr, 3*time.Minute)            // includes building the hub
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

// browserProcesses lists live chromedriver and Chromium processes as "pid:name"
// (zombies are already dead and are not counted).
func browserProcesses() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < 0 || close+2 >= len(s) || s[close+2] == 'Z' {
			continue
		}
		comm := s[open+1 : close]
		if strings.HasPrefix(comm, "chrom") {
			out = append(out, e.Name()+":"+comm)
		}
	}
	return out
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
}

func runClient(hubURL, page, shot string, hold time.Duration) (clientResult, error) {
	out, err := exec.Command(python, "testdata/client.py", hubURL+"/wd/hub", page, shot, fmt.Sprint(hold.Seconds())).CombinedOutput()
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
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n")) {
		t.Errorf("screenshot %s is not a PNG (%v)", shot, err)
	}
}

func TestRealChromiumThroughHub(t *testing.T) {
	requireRealParts(t)
	before := map[string]bool{} // browsers that were running already are not ours
	for _, p := range browserProcesses() {
		before[p] = true
	}
	if len(before) != 0 {
		t.Logf("browser processes before the test (not ours): %v", before)
	}
	h := startHub(t, "-limit", "2", "-start-gate", "off") // this test is about the queue; the gate has its own
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
		before := h.metric(t, `websummoner_queue_wait_seconds_count`)
		beforeFast := h.metric(t, `websummoner_queue_wait_seconds_bucket{le="0.001"}`)
		var wg sync.WaitGroup
		results := make([]clientResult, 4)
		errs := make([]error, 4)
		for i := range 4 {
			wg.Go(func() {
				// Each holds its browser 3s, so the third and fourth must queue.
				results[i], errs[i] = runClient(h.url, page.URL, filepath.Join(dir, fmt.Sprintf("c%d.png", i)), 3*time.Second)
			})
		}
		wg.Wait()
		for i := range 4 {
			if errs[i] != nil {
				t.Fatalf("client %d: %v", i, errs[i])
			}
			checkResult(t, results[i], filepath.Join(dir, fmt.Sprintf("c%d.png", i)))
		}
		admitted := h.metric(t, `websummoner_queue_wait_seconds_count`) - before
		immediate := h.metric(t, `websummoner_queue_wait_seconds_bucket{le="0.001"}`) - beforeFast
		if admitted != 4 || immediate != 2 {
			t.Fatalf("admitted %v, of which at once %v; want 4 and 2 (two queued)", admitted, immediate)
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
	var left []string
	for _, p := range browserProcesses() {
		if !before[p] {
			left = append(left, p)
		}
	}
	if len(left) != 0 {
		t.Fatalf("browser processes outlived their sessions: %v", left)
	}
	h.stop(t)
}
