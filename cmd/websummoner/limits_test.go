package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binaries builds the hub and the stub driver once per test.
func binaries(t *testing.T) (hub, stub, conf string) {
	t.Helper()
	dir := t.TempDir()
	hub, stub = filepath.Join(dir, "websummoner"), filepath.Join(dir, "wdstub")
	for bin, pkg := range map[string]string{hub: "./", stub: "github.com/websummoner/websummoner/cmd/wdstub"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	conf = filepath.Join(dir, "browsers.json")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `{"stub": {"default": "1", "versions": {"1": {"image": [%q]}}}}`, stub), 0o644); err != nil {
		t.Fatal(err)
	}
	return hub, stub, conf
}

// runBinary starts a command and returns its address once it logs [INIT] (or
// its exit status and log if it exits first).
type binaryHub struct {
	cmd  *exec.Cmd
	addr string
	log  *syncLog
	done chan error
}

// syncLog is the hub's log, written by the reader goroutine, read by the test.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line + "\n")
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startBinary(t *testing.T, name string, args ...string) (*binaryHub, error) {
	t.Helper()
	return startBinaryEnv(t, nil, name, args...)
}

// startBinaryEnv is startBinary with variables added to the environment.
func startBinaryEnv(t *testing.T, env []string, name string, args ...string) (*binaryHub, error) {
	t.Helper()
	h := &binaryHub{cmd: exec.Command(name, args...), log: &syncLog{}, done: make(chan error, 1)}
	if env != nil {
		h.cmd.Env = append(os.Environ(), env...)
	}
	pr, pw := io.Pipe()
	h.cmd.Stderr = pw
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.done <- h.cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { h.cmd.Process.Kill(); <-h.done })
	initLine := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			h.log.add(sc.Text())
			if strings.Contains(sc.Text(), "[INIT]") {
				initLine <- sc.Text()
			}
		}
		close(initLine)
	}()
	select {
	case line, ok := <-initLine:
		if !ok {
			return h, fmt.Errorf("exited before [INIT]")
		}
		h.addr = regexp.MustCompile(`listening on (\S+)\]`).FindStringSubmatch(line)[1]
		return h, nil
	case <-time.After(30 * time.Second):
		t.Fatal("no [INIT] in 30s")
	}
	return h, nil
}

// Under a descriptor limit of 256 (prlimit), 300 clients that idle or trickle
// their bodies do not take the hub: /status answers and a queued client is
// served when a slot frees.
func TestServedNearTheDescriptorLimit(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prlimit (util-linux) is required in CI:", err)
		}
		t.Skip("no prlimit (util-linux):", err)
	}
	hub, _, conf := binaries(t)
	h, err := startBinary(t, prlimit, "--nofile=256:256", "--", hub, "-disable-docker", "-conf", conf, "-listen", "127.0.0.1:0",
		"-limit", "1", "-instance", fmt.Sprintf("limits-%d", os.Getpid()))
	if err != nil {
		t.Fatalf("%v\n%s", err, h.log)
	}
	base := "http://" + h.addr
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post(base+"/session", "application/json", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first session: %v %v", resp, err)
	}
	var created struct {
		Value struct{ SessionID string } `json:"value"`
	}
	decodeJSON(t, resp, &created)
	queued := make(chan int, 1)
	go func() { // waits for the only slot
		c := &http.Client{Timeout: time.Minute}
		r, err := c.Post(base+"/session", "application/json", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`))
		if err != nil {
			queued <- 0
			return
		}
		r.Body.Close()
		queued <- r.StatusCode
	}()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 300 {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			break // the hub's backlog is full: as hostile as it gets
		}
		conns = append(conns, c)
		if i%2 == 0 {
			fmt.Fprint(c, "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") // answered, then kept idle
		} else {
			fmt.Fprint(c, "POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{") // trickles
		}
	}
	time.Sleep(1500 * time.Millisecond) // past the second a trickle is spared
	start := time.Now()
	var status *http.Response
	for time.Since(start) < 10*time.Second {
		if status, err = client.Get(base + "/status"); err == nil {
			break
		}
	}
	if err != nil || status.StatusCode != 200 {
		t.Fatalf("/status with 300 idle and slow clients under 256 descriptors: %v %v\n%s", status, err, h.log)
	}
	status.Body.Close()
	t.Logf("/status answered %v after the flood; %d connections were opened", time.Since(start).Round(time.Millisecond), len(conns))
	req, _ := http.NewRequest("DELETE", base+"/session/"+created.Value.SessionID, nil)
	if r, err := client.Do(req); err != nil || r.StatusCode != 200 {
		t.Fatalf("delete: %v %v", r, err)
	}
	if code := <-queued; code != 200 {
		t.Fatalf("the queued client got %d\n%s", code, h.log)
	}
	if !strings.Contains(h.log.String(), "[CONNECTIONS_SHED]") {
		t.Errorf("nothing was shed:\n%s", h.log)
	}
}

// A second hub with the same -instance refuses to start and touches nothing:
// the first one's session keeps working.
func TestSecondHubOfTheSameInstance(t *testing.T) {
	hub, _, conf := binaries(t)
	instance := fmt.Sprintf("twin-%d", os.Getpid())
	first, err := startBinary(t, hub, "-disable-docker", "-conf", conf, "-listen", "127.0.0.1:0", "-instance", instance)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + first.addr
	resp, err := http.Post(base+"/session", "application/json", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("session: %v %v", resp, err)
	}
	var created struct {
		Value struct{ SessionID string } `json:"value"`
	}
	decodeJSON(t, resp, &created)
	second := exec.Command(hub, "-disable-docker", "-conf", conf, "-listen", "127.0.0.1:0", "-instance", instance)
	out, err := second.CombinedOutput()
	var exit *exec.ExitError
	if !asExit(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `another hub with -instance "`+instance+`" is running`) {
		t.Fatalf("second hub: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "ORPHANS_REMOVED") {
		t.Fatal("the second hub swept")
	}
	r, err := http.Get(base + "/session/" + created.Value.SessionID + "/url")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("the first hub's session after the second tried: %v %v", r, err)
	}
	r.Body.Close()
	first.cmd.Process.Signal(syscall.SIGTERM)
	first.cmd.Process.Signal(syscall.SIGTERM)
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func asExit(err error, target **exec.ExitError) bool { return errors.As(err, target) }

// -healthcheck: 0 while a hub answers /healthz on -listen's port, 1 when none does.
func TestHealthcheck(t *testing.T) {
	hub, _, conf := binaries(t)
	h, err := startBinary(t, hub, "-disable-docker", "-conf", conf, "-listen", "127.0.0.1:0", "-instance", fmt.Sprintf("health-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(hub, "-healthcheck", "-listen", h.addr).CombinedOutput(); err != nil {
		t.Fatalf("healthy hub: %v %s", err, out)
	}
	h.cmd.Process.Signal(syscall.SIGKILL)
	var out []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out, err = exec.Command(hub, "-healthcheck", "-listen", h.addr).CombinedOutput(); err != nil {
			break // the port is closed once the kernel has reaped the hub
		}
	}
	var exit *exec.ExitError
	if !asExit(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "unhealthy") {
		t.Fatalf("no hub: %v %s", err, out)
	}
}

// The hub leaves GOMAXPROCS to Go's runtime (which follows the container's
// CPU limit) or to the GOMAXPROCS environment variable, and the [INIT] line
// and /metrics say what it runs with.
func TestGOMAXPROCS(t *testing.T) {
	hubBin, _, conf := binaries(t)
	for i, c := range []struct {
		args []string
		env  string
		want int
	}{
		{nil, "GOMAXPROCS=2", 2},
		{nil, "", runtime.GOMAXPROCS(0)},
	} {
		args := append([]string{"-disable-docker", "-conf", conf, "-listen", "127.0.0.1:0", "-instance", fmt.Sprintf("gomaxprocs-%d-%d", os.Getpid(), i)}, c.args...)
		h := &binaryHub{}
		var err error
		if c.env != "" {
			h, err = startBinaryEnv(t, []string{c.env}, hubBin, args...)
		} else {
			h, err = startBinaryEnv(t, []string{"GOMAXPROCS="}, hubBin, args...)
		}
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, h.log)
		}
		if want := fmt.Sprintf("[GOMAXPROCS %d]", c.want); !strings.Contains(h.log.String(), want) {
			t.Errorf("%v %s: [INIT] lacks %q:\n%s", c.args, c.env, want, h.log)
		}
		resp, err := http.Get("http://" + h.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("\ngo_sched_gomaxprocs_threads %d\n", c.want); !strings.Contains(string(body), want) {
			t.Errorf("%v %s: the runtime does not run with %d: /metrics lacks %q", c.args, c.env, c.want, strings.TrimSpace(want))
		}
	}
}

// Parallel jobs on a hub that has just started, each refusing to queue
// (-disable-queue, or ggr's X-Selenoid-No-Wait): as many as -limit all get a
// session, as under Selenoid, although the start gate paces the first
// starts; the next one is refused for every slot being busy. The stub takes
// 2 s to listen, so the starts overlap.
func TestParallelJobsThatMayNotWait(t *testing.T) {
	hub, stub, _ := binaries(t)
	conf := filepath.Join(t.TempDir(), "browsers.json")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `{"stub": {"default": "1", "versions": {"1": {"image": [%q, "-listen-delay", "2s"]}}}}`, stub), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		flags  []string
		header string
		status int
	}{
		{"disable-queue", []string{"-disable-queue"}, "", http.StatusInternalServerError},
		{"no-wait", nil, "X-Selenoid-No-Wait", http.StatusTooManyRequests},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := startBinary(t, hub, append([]string{"-disable-docker", "-conf", conf, "-listen", "127.0.0.1:0", "-limit", "5",
				"-instance", fmt.Sprintf("parallel-%d", os.Getpid())}, c.flags...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, h.log)
			}
			base := "http://" + h.addr
			client := &http.Client{Timeout: 2 * time.Minute}
			create := func() (int, string) {
				req, _ := http.NewRequest("POST", base+"/session", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`))
				if c.header != "" {
					req.Header.Set(c.header, "")
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return 0, ""
				}
				var body struct {
					Value struct {
						SessionID string `json:"sessionId"`
						Message   string `json:"message"`
					} `json:"value"`
				}
				decodeJSON(t, resp, &body)
				if resp.StatusCode != 200 {
					return resp.StatusCode, body.Value.Message
				}
				return resp.StatusCode, body.Value.SessionID
			}
			type result struct {
				code int
				s    string
			}
			results := make(chan result, 5)
			for range 5 {
				go func() {
					code, s := create()
					results <- result{code, s}
				}()
			}
			var ids []string
			for range 5 {
				r := <-results
				if r.code != 200 {
					t.Errorf("a parallel job: %d %s", r.code, r.s)
					continue
				}
				ids = append(ids, r.s)
			}
			if t.Failed() {
				t.Fatalf("hub log:\n%s", h.log)
			}
			if code, msg := create(); code != c.status || !strings.Contains(msg, "all 5 slots (-limit) are busy") {
				t.Fatalf("a sixth job: %d %q, want %d for every slot busy", code, msg, c.status)
			}
			for _, id := range ids {
				req, _ := http.NewRequest("DELETE", base+"/session/"+id, nil)
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("delete %s: %v %v", id, resp, err)
				}
				resp.Body.Close()
			}
		})
	}
}
