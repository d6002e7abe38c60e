package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// runningBrowsers counts the instance's running containers.
func runningBrowsers(t *testing.T, instance string) int {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-q", "--filter", "label=websummoner.instance="+instance).Output()
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(out)))
}

type poolSession struct {
	Mode       string  `json:"mode"`
	Session    string  `json:"session"`
	Container  string  `json:"container"`
	Created    float64 `json:"created"`
	Downloaded bool    `json:"downloaded"`
	Seen       struct {
		Cookie    string   `json:"cookie"`
		Storage   *string  `json:"storage"`
		Downloads []string `json:"downloads"`
	} `json:"seen"`
}

// The warm pool with real Chromium containers and Python Selenium: hits,
// a near hit and a miss, six sessions one after another each on a container
// of its own that no earlier session touched; a ready browser killed while it
// waits is never handed out; never more browsers than -limit.
func TestDockerWarmPool(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	const limit = 3
	// Chromium alone: -warm-pool N keeps N of every browser's default
	// version, and the shared file's other entries would take slots.
	conf := filepath.Join(t.TempDir(), "browsers.json")
	doc := fmt.Sprintf(`{"chrome": {"default": "156.0", "versions": {"156.0": {"image": %q, "port": "4444", "path": "/", "shmSize": 268435456,
  "caps": {"goog:chromeOptions": {"args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    "prefs": {"download.default_directory": "/home/selenium/Downloads", "download.prompt_for_download": false}}}}}}}`, chromeTag)
	if err := os.WriteFile(conf, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDockerHub(t, instanceFor(t), "-limit", fmt.Sprint(limit), "-warm-pool", "1", "-conf", conf)
	defer d.assertClean(t)
	defer func() {
		// A drain does not wait for ready browsers: they serve no one, and
		// go with the hub.
		d.terminate(t)
	}()

	// Sampled all along, not waited on: the most browsers running at once.
	stop := make(chan struct{})
	var most int
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if n := runningBrowsers(t, d.instance); n > most {
				most = n
			}
		}
	}()
	defer func() {
		close(stop)
		sampling.Wait()
		if most > limit {
			t.Errorf("%d browsers ran at once with -limit %d", most, limit)
		}
	}()

	modes := []string{"hit", "hit", "near", "hit", "miss", "hit"}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "testdata/pool.py", d.url, strings.Join(modes, ","))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	out := bufio.NewScanner(stdout)
	d.await(t, "[POOL_FILL] [chrome")
	containersSeen := map[string]string{}
	var hits []float64
	for i, mode := range modes {
		fmt.Fprintln(stdin, "go")
		if !out.Scan() {
			t.Fatalf("session %d (%s): the client stopped", i, mode)
		}
		var s poolSession
		if err := json.Unmarshal(out.Bytes(), &s); err != nil {
			t.Fatalf("session %d: %v %q", i, err, out.Text())
		}
		if s.Container == "" {
			t.Fatalf("session %d (%s) has no container in /status", i, mode)
		}
		if earlier, ok := containersSeen[s.Container]; ok {
			t.Fatalf("session %d (%s) ran in the container of %s: a browser served twice", i, mode, earlier)
		}
		containersSeen[s.Container] = s.Session
		if s.Seen.Cookie != "" || s.Seen.Storage != nil || len(s.Seen.Downloads) != 0 {
			t.Fatalf("session %d (%s) saw an earlier session's state: %+v", i, mode, s.Seen)
		}
		if !s.Downloaded {
			t.Fatalf("session %d (%s): its download never appeared at /download/", i, mode)
		}
		if mode == "hit" {
			hits = append(hits, s.Created)
		}
		t.Logf("session %d: %s, created in %.3fs, container %.12s", i, mode, s.Created, s.Container)
		if mode != "miss" {
			d.await(t, "[POOL_FILL]") // the pool refills before the next session
		}
	}
	for result, want := range map[string]float64{"hit": 4, "near": 1, "miss": 1} {
		if got := d.metric(t, `websummoner_pool_claims_total{result="`+result+`"}`); got != want {
			t.Errorf("claims %s = %v, want %v", result, got, want)
		}
	}

	// The ready browser dies while it waits: a new session never gets it.
	// It is the one container no session ran in (the last session's may
	// still be going).
	var ready []string
	for _, c := range containers(t, d.instance) {
		used := false
		for full := range containersSeen {
			used = used || strings.HasPrefix(full, c)
		}
		if !used {
			ready = append(ready, c)
		}
	}
	if len(ready) != 1 {
		t.Fatalf("containers no session ran in = %v, want the one ready browser", ready)
	}
	if out, err := exec.Command("docker", "kill", ready[0]).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	r := call(t, "POST", d.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	if r.status != 200 {
		t.Fatalf("after the ready browser died: %d %+v", r.status, r.Value)
	}
	info, _ := statusSessionOf(t, d.hub, r.Value.SessionID)["containerInfo"].(map[string]any)
	if id, _ := info["id"].(string); id == "" || strings.HasPrefix(id, ready[0]) {
		t.Fatalf("the session was given the killed browser (%v)", info)
	}
	if got := d.metric(t, `websummoner_pool_discarded_total{reason="dead"}`); got != 1 {
		t.Errorf("dead discards = %v, want 1", got)
	}
	call(t, "DELETE", d.url+"/wd/hub/session/"+r.Value.SessionID, "")
	t.Logf("hit create times (s): %v", hits)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("client: %v", err)
	}
}

// The warm pool with local driver processes (config/browsers.local.json,
// real chromedriver and Chromium): Python Selenium's stock ChromeOptions get
// the ready browser at once, each session's driver is its own, and after the
// hub stops nothing of the pool is left running.
func TestLocalWarmPool(t *testing.T) {
	requireRealParts(t)
	// browsers.local.json has four names (chrome, and WebKit's three): -warm-pool
	// 1 keeps one of each, and a session needs a slot beside them.
	h := startHub(t, "-limit", "6", "-warm-pool", "1")
	page := pageServer(t)
	dir := t.TempDir()
	// Ready means /status says so: a log line can belong to a fill that a
	// claim has already taken.
	poolReady := func() bool {
		rows, _ := h.getJSON(t, "/status")["pool"].([]any)
		for _, r := range rows {
			if r := r.(map[string]any); r["browser"] == "chrome" {
				return r["ready"] == 1.0
			}
		}
		return false
	}
	var sessions []string
	for i := range 2 {
		if !waitFor(time.Minute, poolReady) {
			t.Fatalf("the pool is not ready before session %d: %v", i, h.getJSON(t, "/status")["pool"])
		}
		shot := filepath.Join(dir, fmt.Sprintf("p%d.png", i))
		r, err := runClient(h.url, page.URL, shot, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, r, shot)
		line := h.await(t, "[SESSION_CREATED]")
		if !strings.Contains(line, r.Session) || !strings.Contains(line, "[warm pool hit]") {
			t.Fatalf("session %d was not a warm pool hit: %s", i, line)
		}
		sessions = append(sessions, r.Session)
		t.Logf("session %d: created in %.3fs from the pool", i, r.Created)
	}
	if sessions[0] == sessions[1] {
		t.Fatal("two clients got the same session")
	}
	if got := h.metric(t, `websummoner_pool_claims_total{result="hit"}`); got != 2 {
		t.Fatalf("hits = %v, want 2", got)
	}
	h.stop(t)
	if left := ourProcesses(h.instance); len(left) != 0 {
		t.Fatalf("processes of the pool left after the hub stopped: %v", left)
	}
}

// terminate sends the hub SIGTERM and waits a minute at most for it to exit
// cleanly.
func (d *dockerHub) terminate(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("hub exit: %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("the hub did not exit on SIGTERM")
	}
}
