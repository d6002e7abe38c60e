package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// switchClient is Python Selenium as a Selenoid suite configures it: Chromium
// arguments of its own, selenoid:options with env, labels and a key no grid
// but another knows. It prints the session's id, then waits for a line on
// stdin before quitting, so the test can look at the session meanwhile.
const switchClient = `
import sys
from selenium import webdriver
opts = webdriver.ChromeOptions()
opts.add_argument("--user-data-dir=/tmp/suite-profile")
opts.set_capability("selenoid:options", {"name": "switch", "env": ["SUITE_FLAG=on", "LD_LIBRARY_PATH=/opt/suite"],
    "labels": {"team": "qa"}, "someOtherGridsKey": True, "timeZone": "Europe/Paris"})
d = webdriver.Remote(command_executor=sys.argv[1], options=opts)
try:
    assert d.execute_script("return 20 + 22") == 42
    print(d.session_id, flush=True)
    sys.stdin.readline()
finally:
    d.quit()
`

// A Selenoid suite's first run against a Docker-backed hub: what Selenoid
// lets a client choose inside its own container (any env, Chromium's
// arguments, unknown selenoid:options keys) starts a session, and the
// session looks as Selenoid shows it — /status's containerInfo and merged
// caps, the name label, the live log from the container's start, CDP's
// /json/protocol.
func TestDockerSelenoidSuiteRunsUnchanged(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang fails
	defer cancel()
	py := exec.CommandContext(ctx, "/usr/bin/python3", "-c", switchClient, d.url+"/wd/hub")
	stdin, _ := py.StdinPipe()
	var errOut lockedBuffer
	out := &firstLine{line: make(chan string, 1)}
	py.Stdout, py.Stderr = out, &errOut
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- py.Wait(); out.close() }() // a client that fails ends the wait below
	waited := false
	wait := func() error {
		if waited {
			return nil
		}
		waited = true
		return <-exited
	}
	t.Cleanup(func() { stdin.Close(); wait(); cancel() })
	var id string
	select {
	case id = <-out.line:
	case <-ctx.Done():
	}
	if len(id) < 16 {
		wait()
		t.Fatalf("the Python client made no session (%q); stderr %s", id, errOut.String())
	}

	// The container has the client's env and Selenoid's name label.
	ids := containers(t, d.instance)
	if len(ids) != 1 {
		t.Fatalf("want one browser container, got %v", ids)
	}
	inspect, err := exec.Command("docker", "inspect", "--format", "{{json .Config}}", ids[0]).Output()
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Env    []string
		Labels map[string]string
	}
	json.Unmarshal(inspect, &cfg)
	for _, want := range []string{"SUITE_FLAG=on", "LD_LIBRARY_PATH=/opt/suite", "TZ=Europe/Paris", "ENABLE_VIDEO=false"} {
		if !strings.Contains(strings.Join(cfg.Env, "\n")+"\n", want+"\n") {
			t.Errorf("the container's env lacks %s: %v", want, cfg.Env)
		}
	}
	if cfg.Labels["name"] != "switch" || cfg.Labels["team"] != "qa" {
		t.Errorf("the container's labels %v: want Selenoid's name label and the client's", cfg.Labels)
	}

	// /status as Selenoid shows the session.
	st := d.getJSON(t, "/status")
	var entry map[string]any
	for _, versions := range st["browsers"].(map[string]any) {
		for _, quotas := range versions.(map[string]any) {
			for _, q := range quotas.(map[string]any) {
				for _, s := range q.(map[string]any)["sessions"].([]any) {
					if s.(map[string]any)["id"] == id {
						entry = s.(map[string]any)
					}
				}
			}
		}
	}
	if entry == nil {
		t.Fatalf("/status does not list %s: %v", id, st)
	}
	info, _ := entry["containerInfo"].(map[string]any)
	if full, _ := info["id"].(string); !strings.HasPrefix(full, ids[0]) || len(full) != 64 || entry["container"] != full || info["ip"] == "" {
		t.Errorf("/status container %v, containerInfo %v: want the full id of %s and its address", entry["container"], info, ids[0])
	}
	if caps, _ := entry["caps"].(map[string]any); caps["timeZone"] != "Europe/Paris" || caps["name"] != "switch" || caps["env"] == nil {
		t.Errorf("/status caps %v: want the client's selenoid:options merged in", entry["caps"])
	}

	// CDP's protocol description, as the browser serves it.
	proto := rawCall(t, "GET", d.url+"/devtools/"+id+"/json/protocol", "")
	var p struct {
		Domains []struct{ Domain string } `json:"domains"`
	}
	if err := json.Unmarshal(proto, &p); err != nil || len(p.Domains) < 10 {
		t.Errorf("/devtools/%s/json/protocol: %d bytes, %d domains, %v", id, len(proto), len(p.Domains), err)
	}

	// The live log from the container's start: its first bytes were written
	// before anyone followed.
	lctx, lcancel := context.WithTimeout(ctx, time.Minute)
	req, _ := http.NewRequestWithContext(lctx, "GET", d.url+"/logs/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 4096)
	n, _ := io.ReadAtLeast(resp.Body, head, 1)
	resp.Body.Close()
	lcancel()
	first, _ := exec.Command("docker", "logs", ids[0]).CombinedOutput()
	first = first[:min(len(first), n, 64)]
	if resp.StatusCode != 200 || n == 0 || len(first) == 0 || !bytes.HasPrefix(head[:n], first) {
		t.Errorf("/logs/%s: %d, began %q; want the container's output from its start, %q", id, resp.StatusCode, head[:n], first)
	}

	stdin.Write([]byte("done\n"))
	if err := wait(); err != nil {
		t.Fatalf("the Python client: %v\n%s", err, errOut.String())
	}
	d.assertClean(t)
}

// A browser or version the grid lacks is Selenoid's answer, as a Python
// Selenium client reports it: the words retry logic keys on.
func TestUnknownBrowserAsSelenoidAnswers(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := `
import sys
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
opts = webdriver.ChromeOptions()
opts.browser_version = "999.0"
try:
    webdriver.Remote(command_executor=sys.argv[1], options=opts).quit()
    print("created")
except WebDriverException as e:
    print(type(e).__name__, e.msg)
`
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", script, h.url+"/wd/hub").CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v %s", err, out)
	}
	if got := string(out); !strings.HasPrefix(got, "InvalidArgumentException") || !strings.Contains(got, "Requested environment is not available") {
		t.Fatalf("the client saw %q; want InvalidArgumentException with Selenoid's words", got)
	}
}

// firstLine is a process's stdout that never blocks it: it keeps what is
// written and sends the first line, once, on line ("" if the output ends
// without one).
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	sent bool
	line chan string
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf = append(f.buf, p...)
	if i := bytes.IndexByte(f.buf, '\n'); i >= 0 && !f.sent {
		f.sent = true
		f.line <- strings.TrimSpace(string(f.buf[:i]))
	}
	return len(p), nil
}

// close says the output has ended.
func (f *firstLine) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.sent {
		f.sent = true
		f.line <- ""
	}
}

// The hub's own refusals reach a real Python Selenium client as exceptions
// with the hub's words. Python's client takes only statuses 400–500 for
// errors: the 503 a draining hub used to answer was read as a session, and
// failed as KeyError: 'sessionId'.
func TestPythonSeesADrainingHubsRefusal(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "2", "-graceful-period", "2m")
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	if r.status != 200 {
		t.Fatalf("create: %+v", r)
	}
	// The live session keeps the hub draining, not gone.
	syscall.Kill(h.hubPID(t), syscall.SIGTERM)
	h.await(t, "[SHUTTING_DOWN]")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := `
import sys
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
try:
    webdriver.Remote(command_executor=sys.argv[1], options=webdriver.ChromeOptions()).quit()
    print("created")
except WebDriverException as e:
    print(type(e).__name__, e.msg)
`
	out, err := exec.CommandContext(ctx, python, "-c", script, h.url+"/wd/hub").CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v %s", err, out)
	}
	if got := string(out); !strings.HasPrefix(got, "SessionNotCreatedException") || !strings.Contains(got, "shutting down") {
		t.Fatalf("the client saw %q; want SessionNotCreatedException saying the hub is shutting down", got)
	}
	call(t, "DELETE", h.url+"/wd/hub/session/"+r.Value.SessionID, "")
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("hub exit after its last session: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the hub did not exit after its last session ended")
	}
}
