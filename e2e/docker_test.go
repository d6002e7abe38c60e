package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

// The Docker tests run the hub binary against the machine's real Docker Engine,
// with the two test images built by the repository's scripts.

var (
	buildOnce                                  sync.Once
	buildDir                                   string // removed by TestMain
	hubBinary, stubTag, chromeTag, recorderTag string
	buildErr                                   error
)

func requireDocker(t *testing.T) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the Docker engine is required in CI:", err)
		}
		t.Skip("no Docker engine:", err)
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "websummoner-e2e")
		if err != nil {
			buildErr = err
			return
		}
		buildDir = dir
		hubBinary = filepath.Join(dir, "websummoner")
		if out, err := exec.Command("go", "build", "-o", hubBinary, "../cmd/websummoner").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build hub: %v\n%s", err, out)
			return
		}
		if stubTag, buildErr = lastLine("../images/wdstub/build.sh"); buildErr != nil {
			return
		}
		if chromeTag, buildErr = lastLine("../images/chromium/build.sh"); buildErr != nil { // cached by tag after the first build
			return
		}
		recorderTag, buildErr = lastLine("../images/recorder/build.sh")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func lastLine(script string) (string, error) {
	out, err := exec.Command(script).Output()
	if err != nil {
		return "", fmt.Errorf("%s: %v", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

type dockerHub struct {
	*hub
	instance string
	args     []string
	videos   string // -video-output-dir
}

// startDockerHub runs the hub in Docker mode with a browsers.json naming the test
// images: "stub", "slow" (a stub that never answers), "ghost" (a missing image)
// "chrome" (real Chromium, headed on the image's virtual screen, as
// config/browsers.docker.json runs it; version "headless": the same image with
// --headless). Videos go to a directory of the test's.
func startDockerHub(t *testing.T, instance string, args ...string) *dockerHub {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "browsers.json")
	doc := fmt.Sprintf(`{
  "stub":  {"default": "1", "versions": {"1": {"image": %q, "port": "4444", "path": "/"}}},
  "slow":  {"default": "1", "versions": {"1": {"image": %q, "port": "4444", "path": "/", "env": ["WDSTUB_LISTEN_DELAY=1h"]}}},
  "ghost": {"default": "1", "versions": {"1": {"image": "websummoner/ghost:none", "port": "4444"}}},
  "chrome": {"default": "156.0", "versions": {
    "156.0": {"image": %q, "port": "4444", "path": "/", "shmSize": 268435456, "allowedNetworks": [%q],
      "caps": {"goog:chromeOptions": {"args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--remote-debugging-port=9222"],
        "prefs": {"download.default_directory": "/home/selenium/Downloads", "download.prompt_for_download": false}}}},
    "headless": {"image": %q, "port": "4444", "path": "/", "shmSize": 268435456,
      "caps": {"goog:chromeOptions": {"args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]}}}}}
}`, stubTag, stubTag, chromeTag, "ws-e2e-extra-"+runID, chromeTag)
	if err := os.WriteFile(conf, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	videos := t.TempDir()
	all := append([]string{"-conf", conf, "-listen", addr, "-instance", instance, "-sweep-interval", "1s",
		"-video-output-dir", videos, "-video-recorder-image", recorderTag}, args...)
	// Registered before the hub starts, so it runs after the hub has been
	// stopped or killed (cleanups run last first), whether the test passed or not.
	removeInstance(t, instance)
	h := runHub(t, hubBinary, all, addr)
	return &dockerHub{hub: h, instance: instance, args: all, videos: videos}
}

// removeInstance registers the removal, at the test's end, of every container
// and Docker network labelled with a hub instance: whatever a test did and
// however it ended, nothing of the instance is left behind. Containers go
// first, as a network in use cannot be removed.
func removeInstance(t *testing.T, instance string) {
	t.Helper()
	t.Cleanup(func() {
		label := "label=websummoner.instance=" + instance
		exec.Command("sh", "-c", "docker ps -aq --filter "+label+" | xargs -r docker rm -f").Run()
		exec.Command("sh", "-c", "docker network ls -q --filter "+label+" | xargs -r docker network rm").Run()
		removeInstanceFiles(instance) // a killed hub's, had it made any
	})
}

// dockerNetwork creates a Docker network of the test's and registers its
// removal at once, after the removal of every container of instances
// registered later (cleanups run last first), so that no container still
// holds it then.
func dockerNetwork(t *testing.T, name string) {
	t.Helper()
	if out, err := exec.Command("docker", "network", "create", "--label", "websummoner.e2e.run="+runID, name).CombinedOutput(); err != nil {
		t.Fatalf("network %s: %v %s", name, err, out)
	}
	t.Cleanup(func() {
		// Any container still on it (a browser of a killed hub, say) first.
		exec.Command("sh", "-c", "docker ps -aq --filter network="+name+" | xargs -r docker rm -f").Run()
		if out, err := exec.Command("docker", "network", "rm", name).CombinedOutput(); err != nil {
			t.Errorf("removing the test's network %s: %v %s", name, err, out)
		}
	})
}

// runHub starts a hub binary and returns once it has logged that it listens.
func runHub(t *testing.T, bin string, args []string, addr string) *hub {
	t.Helper()
	return launch(t, exec.Command(bin, args...), addr, time.Minute)
}

func containers(t *testing.T, instance string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=websummoner.instance="+instance).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// assertClean is the check after every Docker test: no container of the
// instance, and /status shows nothing used, queued or pending.
func (d *dockerHub) assertClean(t *testing.T) {
	t.Helper()
	if !d.exited() {
		d.settled(t)
	}
	if left := containers(t, d.instance); len(left) != 0 {
		t.Errorf("containers left: %v", left)
	}
	if !d.exited() {
		st := d.getJSON(t, "/status")
		if st["used"] != 0.0 || st["queued"] != 0.0 || st["pending"] != 0.0 {
			t.Errorf("status not idle: %v", st)
		}
	}
}

type wdResponse struct {
	status int
	header http.Header
	caps   map[string]any // value.capabilities of a new-session answer
	Value  struct {
		SessionID string `json:"sessionId"`
		Error     string `json:"error"`
		Message   string `json:"message"`
	} `json:"value"`
}

func call(t *testing.T, method, url, body string) wdResponse {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r wdResponse
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("%s %s: %d non-JSON %q", method, url, resp.StatusCode, data)
	}
	r.status, r.header = resp.StatusCode, resp.Header
	var c struct {
		Value struct {
			Capabilities map[string]any `json:"capabilities"`
		} `json:"value"`
	}
	if json.Unmarshal(data, &c) == nil {
		r.caps = c.Value.Capabilities
	}
	return r
}

// rawCall is call's body, undecoded.
func rawCall(t *testing.T, method, url, body string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return data
}

func newSession(t *testing.T, d *dockerHub, browser string) wdResponse {
	t.Helper()
	return call(t, "POST", d.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"`+browser+`"}}}`)
}

// waitingClient is a Python client run with "wait": it creates its session,
// prints a line, and goes on only when told, so that a test can set up the page
// (or stop the hub) in between.
type waitingClient struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startWaitingClient(t *testing.T, script string, args ...string) *waitingClient {
	t.Helper()
	// Killed at clientTimeout, which ends its output and so any read of it: a
	// client that hangs fails the test; and at the test's end, whatever happened.
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	t.Cleanup(cancel)
	c := &waitingClient{cmd: exec.CommandContext(ctx, python, append([]string{script}, args...)...)}
	c.stdin, _ = c.cmd.StdinPipe()
	stdout, _ := c.cmd.StdoutPipe()
	c.cmd.Stderr = os.Stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.out = bufio.NewScanner(stdout)
	if !c.out.Scan() {
		c.cmd.Wait()
		t.Fatal("the client made no session")
	}
	return c
}

// finish lets the client go on and returns its last line, its result.
func (c *waitingClient) finish(t *testing.T) string {
	t.Helper()
	fmt.Fprintln(c.stdin, "go")
	var last string
	for c.out.Scan() {
		last = c.out.Text()
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("client: %v %s", err, last)
	}
	return last
}

// servePageIn serves the test page (and its download) on 127.0.0.1:port inside
// a browser container's own network namespace: a stub container joined to it,
// so no traffic leaves loopback. It returns once the page is served, and the
// container is removed with the test.
func servePageIn(t *testing.T, browser string, port int) {
	t.Helper()
	out, err := exec.Command("docker", "run", "-d", "--rm", "--network", "container:"+browser, stubTag, "-port", strconv.Itoa(port), "-serve-page").CombinedOutput()
	if err != nil {
		t.Fatalf("page container: %v %s", err, out)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })
	// Started is not listening: the browser asked for the page at once was
	// refused (net::ERR_CONNECTION_REFUSED). The stub says when it listens.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound for a hang
	defer cancel()
	logs := exec.CommandContext(ctx, "docker", "logs", "-f", id)
	stdout, _ := logs.StdoutPipe()
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	defer logs.Wait()
	defer cancel()
	for sc := bufio.NewScanner(stdout); sc.Scan(); {
		if strings.Contains(sc.Text(), "listening on") {
			return
		}
	}
	t.Fatalf("the page container %s never listened on port %d", id, port)
}

// instanceFor names a Docker test's hub instance: the test's name, and the
// run's, so that two runs at once never share containers.
func instanceFor(t *testing.T) string {
	return "e2e-" + strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-")) + "-" + runID
}

// Python Selenium through the hub into a Chromium container. The page is served
// on 127.0.0.1 inside the browser's own network namespace (a stub container
// joined to it), so no traffic leaves loopback.
func TestDockerRealChromium(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "2")
	shot := filepath.Join(t.TempDir(), "docker.png")
	client := startWaitingClient(t, "testdata/client.py", d.url+"/wd/hub", "http://127.0.0.1:8090/", shot, "0", "wait")
	browser := containers(t, d.instance)
	if len(browser) != 1 {
		t.Fatalf("want one browser container, got %v", browser)
	}
	servePageIn(t, browser[0], 8090)
	var r clientResult
	if err := json.Unmarshal([]byte(client.finish(t)), &r); err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, shot)
	// The image's window manager maximizes the window to the whole screen
	// (the image's default), as in Selenoid's images.
	if r.Window != "1920x1080" {
		t.Errorf("maximized window %q, want the screen's 1920x1080", r.Window)
	}
	d.assertClean(t)
}

func TestDockerKillMidSession(t *testing.T) {
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t))
	s := newSession(t, d, "stub")
	if s.status != 200 {
		t.Fatalf("create: %+v", s)
	}
	c := containers(t, d.instance)
	if err := exec.Command("docker", "kill", c[0]).Run(); err != nil {
		t.Fatal(err)
	}
	d.await(t, "[BROWSER_EXITED]") // the death arrives through the engine's event stream
	r := call(t, "GET", d.url+"/wd/hub/session/"+s.Value.SessionID+"/url", "")
	if r.status != 404 || r.Value.Error != "invalid session id" || !strings.Contains(r.Value.Message, "exited") {
		t.Fatalf("after docker kill: %+v", r)
	}
	d.assertClean(t)
}

func TestDockerStartupHangAndMissingImage(t *testing.T) {
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1", "-service-startup-timeout", "2s")
	r := newSession(t, d, "slow")
	if r.status != 500 || r.Value.Error != "session not created" || !strings.Contains(r.Value.Message, "-service-startup-timeout 2s") {
		t.Fatalf("hanging start: %+v", r)
	}
	d.assertClean(t)
	// With the only slot held, a missing image still fails: before the queue.
	// Had the request queued (no -queue-timeout: it waits until the client
	// gives up), it would have no answer while the held session lives, and
	// the call would fail at the client's timeout.
	held := newSession(t, d, "stub")
	r = newSession(t, d, "ghost")
	if r.status != 500 || !strings.Contains(r.Value.Message, `"websummoner/ghost:none" is not on the Docker engine`) {
		t.Fatalf("missing image: %+v", r)
	}
	call(t, "DELETE", d.url+"/wd/hub/session/"+held.Value.SessionID, "")
	d.assertClean(t)
}

// SIGKILL with sessions and a start in flight, then a restart: the start-up sweep
// removes what the dead hub left.
func TestDockerHubKilledThenRestarted(t *testing.T) {
	requireDocker(t)
	instance := instanceFor(t)
	d := startDockerHub(t, instance, "-limit", "3")
	for range 2 {
		if r := newSession(t, d, "stub"); r.status != 200 {
			t.Fatalf("create: %+v", r)
		}
	}
	// The engine's own event stream says when the third container has started.
	ev := exec.Command("docker", "events", "--filter", "label=websummoner.instance="+instance, "--filter", "event=start", "--format", "{{.ID}}")
	evOut, _ := ev.StdoutPipe()
	if err := ev.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ev.Process.Kill(); ev.Wait() }()
	go http.Post(d.url+"/wd/hub/session", "application/json", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"slow"}}}`))
	if !bufio.NewScanner(evOut).Scan() {
		t.Fatal("no start event for the third container")
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	if n := len(containers(t, instance)); n != 3 {
		t.Fatalf("want the dead hub's 3 containers, found %d", n)
	}
	addr := strings.TrimPrefix(d.url, "http://")
	h2 := runHub(t, hubBinary, d.args, addr)
	if !strings.Contains(h2.logs.String(), "[CONTAINERS_REMOVED] [3]") {
		h2.await(t, "[CONTAINERS_REMOVED] [3]")
	}
	d2 := &dockerHub{hub: h2, instance: instance}
	d2.assertClean(t)
}

// SIGTERM with a live session: new and queued requests get a JSON 500 with
// Retry-After; the live session works on and may finish within
// -graceful-period; once it has, every container is removed and the hub exits
// 0. The period is long enough that no busy machine ends the drain before the
// test's calls, and the hub exits as soon as the live session ends, not at
// the period's end (a session the period ends is
// TestDockerVideoSurvivesKillAndShutdown's).
func TestDockerGracefulShutdown(t *testing.T) {
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1", "-graceful-period", "10m", "-log-level", "debug")
	live := newSession(t, d, "stub")
	if live.status != 200 {
		t.Fatalf("create: %+v", live)
	}
	queued := make(chan wdResponse, 1)
	go func() { queued <- newSession(t, d, "stub") }()
	d.await(t, "[QUEUED]")
	d.cmd.Process.Signal(syscall.SIGTERM)
	q := <-queued
	if q.status != 500 || q.Value.Error != "session not created" || q.header.Get("Retry-After") == "" {
		t.Fatalf("queued request on SIGTERM: %+v", q)
	}
	if r := newSession(t, d, "stub"); r.status != 500 || r.header.Get("Retry-After") == "" {
		t.Fatalf("new request while draining: %+v", r)
	}
	if r := call(t, "GET", d.url+"/wd/hub/session/"+live.Value.SessionID+"/url", ""); r.status != 200 {
		t.Fatalf("live session broken while draining: %+v", r)
	}
	if r := call(t, "DELETE", d.url+"/wd/hub/session/"+live.Value.SessionID, ""); r.status != 200 {
		t.Fatalf("the live session's DELETE while draining: %+v", r)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(3 * time.Minute): // far below -graceful-period
		t.Fatal("hub did not exit once its last session had ended")
	}
	d.assertClean(t)
}

// A burst of 3× -limit new sessions with the stub image, through the adaptive
// start gate: every one is served, and no start fails.
func TestDockerBurstThroughGate(t *testing.T) {
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "4")
	var wg sync.WaitGroup
	errs := make(chan string, 12)
	for range 12 {
		wg.Go(func() {
			r := newSession(t, d, "stub")
			if r.status != 200 {
				errs <- fmt.Sprintf("%d %s", r.status, r.Value.Message)
				return
			}
			call(t, "DELETE", d.url+"/wd/hub/session/"+r.Value.SessionID, "")
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error("session failed:", e)
	}
	if n := d.metric(t, `websummoner_gate_start_outcomes_total{outcome="failure"}`); n != 0 {
		t.Errorf("%v start failures", n)
	}
	if n := d.metric(t, `websummoner_gate_start_outcomes_total{outcome="success"}`); n != 12 {
		t.Errorf("%v successful starts, want 12", n)
	}
	st := d.getJSON(t, "/status")
	if g, _ := st["gate"].(map[string]any); g == nil || g["mode"] != "adaptive" {
		t.Errorf("/status gate: %v", st["gate"])
	}
	d.assertClean(t)
}
