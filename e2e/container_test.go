package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hubContainer runs the hub image as docs/operations.md says, with browsers as
// sibling containers on a user-defined network; it returns the hub's URL on the
// host.
func hubContainer(t *testing.T, image, name, network, instance, conf string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/var/run/docker.sock", &st); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("docker", "run", "-d", "--name", name, "--network", network, "-p", "127.0.0.1::4444",
		"-v", "/var/run/docker.sock:/var/run/docker.sock", "--group-add", fmt.Sprint(st.Gid),
		"-v", conf+":/etc/websummoner/browsers.json:ro", image,
		"-container-network", network, "-container-address", "name", "-instance", instance, "-graceful-period", "60s").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	port, err := exec.Command("docker", "port", name, "4444/tcp").Output()
	if err != nil {
		t.Fatalf("docker port: %v", err)
	}
	url := "http://" + strings.TrimSpace(strings.Split(string(port), "\n")[0])
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url + "/ping"); err == nil {
			resp.Body.Close()
			return url
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
			t.Fatalf("the hub container does not answer on %s:\n%s", url, logs)
		}
	}
}

// The hub as a container: Python Selenium on the host drives the Chromium
// image through the hub container's published port; `docker stop` drains it
// (the live session keeps working, new requests get 503 + Retry-After) and
// leaves no browser behind; a SIGKILLed hub's browsers are swept by the next.
func TestHubContainer(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	out, err := exec.Command("make", "-s", "-C", "..", "image").Output()
	if err != nil {
		t.Fatalf("make image: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	image := lines[len(lines)-1]
	if health, _ := exec.Command("docker", "image", "inspect", "-f", "{{json .Config.Healthcheck.Test}} {{.Config.User}}", image).Output(); !strings.Contains(string(health), "-healthcheck") || strings.HasPrefix(strings.Fields(string(health))[1], "0") {
		t.Fatalf("image healthcheck and user: %s", health)
	}
	network, instance := "ws-e2e-hub-"+runID, "e2e-hub-"+runID
	// The network's removal, registered first, runs last: after the hub
	// container's (hubContainer) and its browsers' (removeInstance), which
	// hold it. Removing it before them, as a deferred call did, failed on
	// every path and left the network behind.
	dockerNetwork(t, network)
	removeInstance(t, instance)
	conf := filepath.Join(t.TempDir(), "browsers.json")
	doc := fmt.Sprintf(`{"stub": {"default": "1", "versions": {"1": {"image": %q, "port": "4444", "path": "/"}}},
  "chrome": {"default": "1", "versions": {"1": {"image": %q, "port": "4444", "path": "/", "shmSize": 268435456,
    "caps": {"goog:chromeOptions": {"args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]}}}}}}`, stubTag, chromeTag)
	if err := os.WriteFile(conf, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "ws-e2e-hub-" + runID
	url := hubContainer(t, image, name, network, instance, conf)

	shot := filepath.Join(t.TempDir(), "hub-container.png")
	client := startWaitingClient(t, "testdata/client.py", url+"/wd/hub", "http://127.0.0.1:8090/", shot, "0", "wait")
	browsers := containers(t, instance)
	if len(browsers) != 1 {
		t.Fatalf("browser containers: %v", browsers)
	}
	servePageIn(t, browsers[0], 8090)

	stopped := make(chan error, 1)
	go func() { stopped <- exec.Command("docker", "stop", "-t", "60", name).Run() }()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		r := call(t, "POST", url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`)
		if r.status == 503 && r.header.Get("Retry-After") != "" && r.Value.Error == "session not created" {
			break
		}
		if r.status == 200 { // admitted before the drain began: not a session to keep
			call(t, "DELETE", url+"/wd/hub/session/"+r.Value.SessionID, "")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 503 while draining: %+v", r)
		}
	}
	var r clientResult // the live session works on through the drain, then quits
	if err := json.Unmarshal([]byte(client.finish(t)), &r); err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, shot)
	if err := <-stopped; err != nil {
		t.Fatalf("docker stop: %v", err)
	}
	if code, _ := exec.Command("docker", "inspect", "-f", "{{.State.ExitCode}}", name).Output(); strings.TrimSpace(string(code)) != "0" {
		logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
		t.Fatalf("the hub container exited %s:\n%s", code, logs)
	}
	if left := containers(t, instance); len(left) != 0 {
		t.Fatalf("browsers left after the drain: %v", left)
	}
	exec.Command("docker", "rm", "-f", name).Run()

	// SIGKILL, then a new hub of the same instance sweeps the browser left.
	url = hubContainer(t, image, name, network, instance, conf)
	if r := call(t, "POST", url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`); r.status != 200 {
		t.Fatalf("stub session: %+v", r)
	}
	if out, err := exec.Command("docker", "kill", name).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	if left := containers(t, instance); len(left) != 1 {
		t.Fatalf("after SIGKILL: %v", left)
	}
	exec.Command("docker", "rm", "-f", name).Run()
	hubContainer(t, image, name, network, instance, conf)
	if left := containers(t, instance); len(left) != 0 {
		t.Fatalf("the restarted hub did not sweep: %v", left)
	}
}
