package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	return runHubContainer(t, image, name, conf, []string{"--network", network},
		"-container-network", network, "-container-address", "name", "-instance", instance, "-graceful-period", "60s")
}

// runHubContainer runs the hub image with the Docker socket and conf
// mounted, its port published on the host's loopback, runArgs given to
// docker run and hubArgs to the hub; it returns the hub's URL on the host.
func runHubContainer(t *testing.T, image, name, conf string, runArgs []string, hubArgs ...string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/var/run/docker.sock", &st); err != nil {
		t.Fatal(err)
	}
	// On the host's network nothing is published: the hub listens on the
	// host's loopback, at the -listen it is given. On another container's
	// network, that container publishes the hub's 4444.
	hostNet := slices.Contains(runArgs, "--network=host")
	var owner string
	for _, a := range runArgs {
		if o, ok := strings.CutPrefix(a, "--network=container:"); ok {
			owner = o
		}
	}
	args := []string{"run", "-d", "--name", name}
	if !hostNet && owner == "" {
		args = append(args, "-p", "127.0.0.1::4444")
	}
	args = append(append(args, "-v", "/var/run/docker.sock:/var/run/docker.sock", "--group-add", fmt.Sprint(st.Gid),
		"-v", conf+":/etc/websummoner/browsers.json:ro"), runArgs...)
	out, err := exec.Command("docker", append(append(args, image), hubArgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	var url string
	if hostNet {
		url = "http://" + hubArgs[slices.Index(hubArgs, "-listen")+1]
	} else {
		published := name
		if owner != "" {
			published = owner
		}
		port, err := exec.Command("docker", "port", published, "4444/tcp").Output()
		if err != nil {
			t.Fatalf("docker port: %v", err)
		}
		url = "http://" + strings.TrimSpace(strings.Split(string(port), "\n")[0])
	}
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
// (the live session keeps working, new requests get 500 + Retry-After) and
// leaves no browser behind; a SIGKILLed hub's browsers are swept by the next.
func TestHubContainer(t *testing.T) {
	image := hubImage(t)
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
		if r.status == 500 && r.header.Get("Retry-After") != "" && r.Value.Error == "session not created" {
			break
		}
		if r.status == 200 { // admitted before the drain began: not a session to keep
			call(t, "DELETE", url+"/wd/hub/session/"+r.Value.SessionID, "")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 500 with Retry-After while draining: %+v", r)
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

// The hub run as Selenoid is usually run: a container on the engine's
// default bridge with the socket mounted, and no network flags. It finds
// that it is a container of the engine, joins each session's own network
// for the session's life and dials the browser there: nothing of the
// browser is published on the host, and the network goes with the session.
func TestHubContainerSelenoidWay(t *testing.T) {
	// As docs/operations.md runs it: the hub's container, on every
	// session's network, is no router between them.
	c := stubThroughHubContainer(t, "hubip", []string{"--sysctl", "net.ipv4.ip_forward=0"})
	hubID := strings.TrimSpace(dockerOut(t, "inspect", "-f", "{{.Id}}", c.name))
	if ports := strings.TrimSpace(dockerOut(t, "port", c.browser)); ports != "" {
		t.Errorf("the browser publishes ports on the host: %s", ports)
	}
	c.joinedBy(t, hubID, "the hub's container")
	c.end(t)
	if left := strings.Fields(dockerOut(t, "network", "ls", "-q", "--filter", "label=websummoner.instance="+c.instance)); len(left) != 0 {
		t.Errorf("session networks left: %v", left)
	}
	if joined := dockerOut(t, "inspect", "-f", "{{range $n, $_ := .NetworkSettings.Networks}}{{$n}} {{end}}", c.name); strings.TrimSpace(joined) != "bridge" {
		t.Errorf("the hub's container is still on: %s", joined)
	}
	if logs, _ := exec.Command("docker", "logs", c.name).CombinedOutput(); !strings.Contains(string(logs), "[INIT] [the hub runs in container") || strings.Contains(string(logs), "IP_FORWARD") {
		t.Errorf("the hub's log: want it in its container, forwarding nothing:\n%s", logs)
	}
}

// A hub container on the host's network (--network host), which can join
// no other network, reaches browsers as a hub on the host does: by their
// address on their session's own network, whose bridge is the host's, with
// nothing published on the host's loopback. It once took itself for a
// container that must join each session's network, and every start failed.
func TestHubContainerHostNetwork(t *testing.T) {
	c := stubThroughHubContainer(t, "hubhost", []string{"--network=host"}, "-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if ports := strings.TrimSpace(dockerOut(t, "port", c.browser)); ports != "" {
		t.Errorf("the browser's ports are published on the host: %q", ports)
	}
	if logs, _ := exec.Command("docker", "logs", c.name).CombinedOutput(); !strings.Contains(string(logs), "[INIT] [the Docker engine's bridges are this host's") {
		t.Errorf("the hub's log: want browsers reached on their own networks:\n%s", logs)
	}
	c.end(t)
}

// A hub container on another container's network (--network container:X,
// a sidecar's way) cannot join networks itself: X joins each session's, and
// the hub dials the browser there, through X's network. The engine mounts
// X's /etc/hostname into such a container, so the hub finds X as its own.
func TestHubContainerOnAnotherContainersNetwork(t *testing.T) {
	requireRealParts(t)
	requireDocker(t) // builds the stub image
	owner := "ws-e2e-netowner-" + runID
	exec.Command("docker", "rm", "-f", owner).Run()
	// The stub image as the network's owner: a container that only sleeps
	// would do as well; this one needs nothing else built. Its own driver
	// listens on 9999, out of the hub's way.
	if out, err := exec.Command("docker", "run", "-d", "--name", owner, "-p", "127.0.0.1::4444", stubTag, "-port", "9999").CombinedOutput(); err != nil {
		t.Fatalf("the network's owner: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", owner).Run() })
	ownerID := strings.TrimSpace(dockerOut(t, "inspect", "-f", "{{.Id}}", owner))
	c := stubThroughHubContainer(t, "hubshared", []string{"--network=container:" + owner})
	c.joinedBy(t, ownerID, "the network's owner")
	c.end(t)
}

// stubSession is a stub browser's session through a hub container.
type stubSession struct {
	url, name, instance string // the hub's URL, its container's name, its -instance
	id, browser         string // the session's id, its browser's container
}

// stubThroughHubContainer runs the hub image (runArgs to docker run,
// hubArgs to the hub) with a stub browser entry, and opens a session with
// one command through it.
func stubThroughHubContainer(t *testing.T, tag string, runArgs []string, hubArgs ...string) *stubSession {
	t.Helper()
	image := hubImage(t)
	c := &stubSession{instance: "e2e-" + tag + "-" + runID, name: "ws-e2e-" + tag + "-" + runID}
	removeInstance(t, c.instance)
	conf := filepath.Join(t.TempDir(), "browsers.json")
	doc := fmt.Sprintf(`{"stub": {"default": "1", "versions": {"1": {"image": %q, "port": "4444", "path": "/"}}}}`, stubTag)
	if err := os.WriteFile(conf, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c.url = runHubContainer(t, image, c.name, conf, runArgs, append(hubArgs, "-instance", c.instance)...)
	r := call(t, "POST", c.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`)
	if r.status != 200 {
		logs, _ := exec.Command("docker", "logs", c.name).CombinedOutput()
		t.Fatalf("new session through the hub container: %+v\n%s", r, logs)
	}
	c.id = r.Value.SessionID
	if r := call(t, "POST", c.url+"/wd/hub/session/"+c.id+"/url", `{"url":"about:blank"}`); r.status != 200 {
		t.Fatalf("command: %+v", r)
	}
	browsers := containers(t, c.instance)
	if len(browsers) != 1 {
		t.Fatalf("browser containers: %v", browsers)
	}
	c.browser = browsers[0]
	return c
}

// joinedBy checks that the session has a network of its own, and that
// container id (what) is on it.
func (c *stubSession) joinedBy(t *testing.T, id, what string) {
	t.Helper()
	nets := strings.Fields(dockerOut(t, "network", "ls", "-q", "--filter", "label=websummoner.instance="+c.instance))
	if len(nets) != 1 {
		t.Fatalf("session networks: %v, want 1", nets)
	}
	if on := dockerOut(t, "network", "inspect", "-f", "{{range $id, $c := .Containers}}{{$id}} {{end}}", nets[0]); !strings.Contains(on, id) {
		t.Errorf("%s is not on the session's network: %s", what, on)
	}
}

// end deletes the session and checks that its teardown, which ends after
// the answer and holds the slot until it has, left no browser.
func (c *stubSession) end(t *testing.T) {
	t.Helper()
	if r := call(t, "DELETE", c.url+"/wd/hub/session/"+c.id, ""); r.status != 200 {
		t.Fatalf("DELETE: %+v", r)
	}
	if st := (&hub{url: c.url}).settled(t); st["used"] != 0.0 {
		t.Fatalf("the session's teardown did not end: %v", st)
	}
	if left := containers(t, c.instance); len(left) != 0 {
		t.Errorf("browsers left: %v", left)
	}
}

// dockerOut runs the docker command line and returns its output.
func dockerOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// hubImage builds the hub's image (make image) and returns its tag.
func hubImage(t *testing.T) string {
	t.Helper()
	requireRealParts(t)
	requireDocker(t)
	out, err := exec.Command("make", "-s", "-C", "..", "image").Output()
	if err != nil {
		t.Fatalf("make image: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
