package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtest"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/wdstub"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// stubLauncher starts an in-process stub WebDriver (a real HTTP server on
// loopback) per session. It is a fake launcher so that tests can inject what a
// real one cannot produce on demand: engine errors, hangs, crashes.
type stubLauncher struct {
	stub       wdstub.Options
	failStarts atomic.Int32  // this many starts fail with an engine error
	block      chan struct{} // if set, Start waits for it (or ctx)
	entered    chan struct{} // if set, Start signals here first
	mu         sync.Mutex
	live       map[*stubInstance]bool
	bodies     chan []byte // new-session bodies the drivers received, if set
	starts     atomic.Int32
	mem        *memTransport // if set, drivers are in-memory handlers on it
	// wrap, if set, stands between the hub and each driver: a fault a real
	// driver will not produce on demand (a non-JSON answer, no session id).
	wrap func(http.Handler) http.Handler
	// startErr, if set, is what every Start returns.
	startErr error
	// panics makes Start panic, as a bug would.
	panics bool
	// sides, if set, adds side services to each instance's endpoints.
	sides func(*launcher.Endpoints)
	// stopping, if set, is where Stop waits: a teardown that takes its time.
	stopping chan struct{}
	// checkOptions, if set, is the launcher's CheckOptions (as Kubernetes'
	// refuses values the API server would).
	checkOptions func(webdriver.Options) error
	// container, if set, makes instances say they run in a container with
	// this id and address (launcher.Container), as the Docker launcher's do.
	container *[2]string
}

// containerStub is a stub instance that says it runs in a container.
type containerStub struct{ *stubInstance }

func (c containerStub) ContainerInfo() (string, string) {
	return c.l.container[0], c.l.container[1]
}

type stubInstance struct {
	l      *stubLauncher
	srv    *httptest.Server // nil for an in-memory driver (mem)
	url    string
	stub   *wdstub.Server
	exited chan struct{}
	once   sync.Once
}

func (l *stubLauncher) Start(ctx context.Context, r launcher.Request) (launcher.Instance, error) {
	l.starts.Add(1)
	if l.entered != nil {
		l.entered <- struct{}{}
	}
	if l.block != nil {
		select {
		case <-l.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if l.startErr != nil {
		return nil, l.startErr
	}
	if l.panics {
		panic("injected: a launcher bug")
	}
	if l.failStarts.Add(-1) >= 0 {
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: r.Browser.Name, Msg: "engine said no"}
	}
	inst := &stubInstance{l: l, stub: wdstub.New(l.stub), exited: make(chan struct{})}
	var h http.Handler = inst.stub
	if l.bodies != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/session") {
				b, _ := io.ReadAll(r.Body)
				l.bodies <- b
				r.Body = io.NopCloser(bytes.NewReader(b))
			}
			inst.stub.ServeHTTP(w, r)
		})
	}
	if l.wrap != nil {
		h = l.wrap(h)
	}
	if l.mem != nil {
		inst.url = "http://" + l.mem.add(h)
	} else {
		inst.srv = httptest.NewServer(h)
		inst.url = inst.srv.URL
	}
	l.mu.Lock()
	if l.live == nil {
		l.live = map[*stubInstance]bool{}
	}
	l.live[inst] = true
	l.mu.Unlock()
	if l.container != nil {
		return containerStub{inst}, nil
	}
	return inst, nil
}

func (l *stubLauncher) CheckOptions(_ config.Resolved, o webdriver.Options) error {
	if l.checkOptions == nil {
		return nil
	}
	return l.checkOptions(o)
}

func (l *stubLauncher) liveCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.live)
}

func (i *stubInstance) Endpoints() launcher.Endpoints {
	u, _ := url.Parse(i.url + "/")
	e := launcher.Endpoints{Driver: u}
	if i.l.sides != nil {
		i.l.sides(&e)
	}
	return e
}
func (i *stubInstance) Exited() <-chan struct{}                { return i.exited }
func (i *stubInstance) ExitReason() string                     { return "driver process ended: signal: killed" }
func (i *stubInstance) Describe() string                       { return "stub " + i.url }
func (i *stubInstance) SessionCreated(string, json.RawMessage) {}
func (i *stubInstance) close() {
	if i.srv != nil {
		i.srv.CloseClientConnections()
		i.srv.Close()
		return
	}
	i.l.mem.remove(strings.TrimPrefix(i.url, "http://"))
}
func (i *stubInstance) crash() {
	i.once.Do(func() { i.close(); close(i.exited) })
}
func (i *stubInstance) Stop(context.Context) error {
	if i.l.stopping != nil {
		<-i.l.stopping
	}
	i.once.Do(i.close)
	i.l.mu.Lock()
	delete(i.l.live, i)
	i.l.mu.Unlock()
	return nil
}

type fixture struct {
	ev   logtest.Lines
	t    testing.TB
	hub  *Hub
	srv  *httptest.Server
	l    *stubLauncher
	q    *queue.Queue
	reg  *prometheus.Registry
	sess *session.Registry
}

const testBrowsers = `{"chrome": {"default": "128.0", "versions": {
  "128.0": {"image": ["chromedriver"], "caps": {"goog:chromeOptions": {"args": ["--headless"]}}},
  "127.0": {"image": ["chromedriver"]}}},
  "firefox": {"default": "1", "versions": {"1": {"image": "selenoid/firefox"}}}}`

func newFixture(t testing.TB, qopts queue.Options, hopts Options, l *stubLauncher) *fixture {
	t.Helper()
	return newFixtureWith(t, qopts, hopts, session.Options{}, l)
}

func newFixtureWith(t testing.TB, qopts queue.Options, hopts Options, sopts session.Options, l *stubLauncher) *fixture {
	t.Helper()
	f := &fixture{t: t, l: l, reg: prometheus.NewRegistry()}
	var log *slog.Logger
	f.ev, log = logtest.New(1000)
	bs, err := config.Parse([]byte(testBrowsers), true)
	if err != nil {
		t.Fatal(err)
	}
	if f.q, err = queue.New(qopts, log, f.reg); err != nil {
		t.Fatal(err)
	}
	if f.sess, err = session.New(sopts, log, f.reg); err != nil {
		t.Fatal(err)
	}
	if l.mem != nil {
		hopts.Transport = l.mem
	}
	if hopts.ExitGrace == 0 {
		// The hostile drivers hang up on purpose, and are no browser
		// that exits: each would wait the whole default.
		hopts.ExitGrace = time.Millisecond
	}
	if f.hub, err = New(hopts, f.q, config.NewStore(bs), Launchers{Process: l}, f.sess, log, f.reg); err != nil {
		t.Fatal(err)
	}
	if l.mem == nil {
		f.srv = httptest.NewServer(f.hub)
	}
	t.Cleanup(func() {
		f.sess.EndAll(session.ReasonShutdown)
		if f.srv != nil {
			f.srv.Close()
		}
		if n := l.liveCount(); n != 0 {
			t.Errorf("%d stub drivers left running", n)
		}
		if st := f.q.Stats(); st.InUse != 0 || st.Waiting != 0 {
			t.Errorf("queue not empty at the end: %+v", st)
		}
	})
	return f
}

func (f *fixture) do(method, path, body string, hdr ...string) (*http.Response, map[string]any) {
	f.t.Helper()
	var resp *http.Response
	if f.srv == nil { // in fake time: no socket, the handler is called directly
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		f.hub.ServeHTTP(rec, req)
		resp = rec.Result()
	} else {
		req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if h := req.Header.Get("Host"); h != "" {
			req.Host = h // what Go's client sends as Host
		}
		var err error
		if resp, err = http.DefaultClient.Do(req); err != nil {
			f.t.Fatal(err)
		}
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil {
		f.t.Fatalf("%s %s: %d non-JSON body %q", method, path, resp.StatusCode, data)
	}
	return resp, out
}

func errOf(body map[string]any) (string, string) {
	v, _ := body["value"].(map[string]any)
	e, _ := v["error"].(string)
	m, _ := v["message"].(string)
	return e, m
}

const w3cChrome = `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`

func TestCreateW3CAndJSONWireShapes(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 2}, Options{}, &stubLauncher{})
	for _, prefix := range []string{"/wd/hub", ""} {
		resp, body := f.do("POST", prefix+"/session", w3cChrome)
		if resp.StatusCode != 200 || resp.Header.Get("Location") != "" {
			t.Fatalf("W3C create: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		if _, top := body["sessionId"]; top {
			t.Fatal("W3C answer has a top-level sessionId")
		}
		id := body["value"].(map[string]any)["sessionId"].(string)
		if id == "" {
			t.Fatal("no value.sessionId")
		}
		if resp, _ := f.do("DELETE", prefix+"/session/"+id, ""); resp.StatusCode != 200 {
			t.Fatalf("delete: %d", resp.StatusCode)
		}
	}
	resp, body := f.do("POST", "/wd/hub/session", `{"desiredCapabilities":{"browserName":"chrome","version":"127"}}`)
	if resp.StatusCode != 200 || body["status"] != 0.0 || body["sessionId"] == "" {
		t.Fatalf("JSONWire create: %d %v", resp.StatusCode, body)
	}
	// The driver was asked in JSONWire too (as chromedriver, the stub then
	// opens a JSONWire session and answers in its shape): what it received is
	// the client's desiredCapabilities, under the key a JSONWire answer gives.
	value := body["value"].(map[string]any)
	received, _ := value["wdstub:received"].(map[string]any)
	if value["wdstub:dialect"] != "jsonwire" || received["browserName"] != "chrome" || received["version"] != nil {
		t.Fatalf("the driver did not get the JSONWire client's desiredCapabilities (less the version): %v", body["value"])
	}
	f.do("DELETE", "/wd/hub/session/"+body["sessionId"].(string), "")
	f.sess.Settled() // the teardown runs after the answer
	if st := f.q.Stats(); st.InUse != 0 {
		t.Fatalf("slots held after delete: %+v", st)
	}
	if got := testutil.ToFloat64(f.hub.m.created); got != 3 {
		t.Fatalf("created_total = %v", got)
	}
}

func TestProxyForwardsPathQueryAndBody(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	_, body := f.do("POST", "/wd/hub/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	resp, body := f.do("POST", "/wd/hub/session/"+id+"/echo?x=1%2F2", `{"k":"v"}`)
	v := body["value"].(map[string]any)
	if resp.StatusCode != 200 || v["path"] != "/session/"+id+"/echo" || v["query"] != "x=1%2F2" || v["body"] != `{"k":"v"}` {
		t.Fatalf("%d %v", resp.StatusCode, v)
	}
	f.do("POST", "/session/"+id+"/url", `{"url":"http://127.0.0.1/x"}`)
	if _, body := f.do("GET", "/session/"+id+"/url", ""); body["value"] != "http://127.0.0.1/x" {
		t.Fatalf("url %v", body)
	}
	f.do("DELETE", "/session/"+id, "")
}

// Errors outside session creation (creation's are TestCreateErrorTable's).
func TestErrors(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	cases := []struct {
		method, path, body string
		status             int
		code, msg          string
	}{
		{"GET", "/wd/hub/session/nope/url", "", 404, "invalid session id", "session nope is not known"},
		{"DELETE", "/session/nope", "", 404, "invalid session id", "nope"},
		{"GET", "/wd/hub/nothing", "", 404, "unknown command", "not a WebDriver endpoint"},
		{"PUT", "/wd/hub/session", "", 405, "unknown method", "PUT"},
	}
	for _, c := range cases {
		resp, body := f.do(c.method, c.path, c.body)
		code, msg := errOf(body)
		if resp.StatusCode != c.status || code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%s %s: %d %q %q; want %d %q containing %q", c.method, c.path, resp.StatusCode, code, msg, c.status, c.code, c.msg)
		}
	}
}

func TestDriverBodyIsCleaned(t *testing.T) {
	l := &stubLauncher{bodies: make(chan []byte, 1)}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","browserVersion":"128","selenoid:options":{"name":"n"},"websummoner:options":{"name":"m"}}}}`)
	got := string(<-l.bodies)
	for _, bad := range []string{"selenoid:options", "websummoner:options", "browserVersion"} {
		if strings.Contains(got, bad) {
			t.Errorf("driver received %s: %s", bad, got)
		}
	}
	if !strings.Contains(got, "--headless") {
		t.Errorf("browsers.json caps not merged: %s", got)
	}
	f.do("DELETE", "/session/"+body["value"].(map[string]any)["sessionId"].(string), "")
}

// firstMatch entries are tried in order, but one for a platform other than
// Linux, where the hub's browsers run, after the rest, as a W3C remote end
// passes over it: the driver gets the Linux entry, not a Windows one it
// would refuse.
func TestFirstMatchPassesOverOtherPlatforms(t *testing.T) {
	l := &stubLauncher{bodies: make(chan []byte, 1)}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	resp, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"},"firstMatch":[{"platformName":"windows","acceptInsecureCerts":true},{"platformName":"linux"}]}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
	if got := string(<-l.bodies); !strings.Contains(got, `"linux"`) || strings.Contains(got, "windows") {
		t.Errorf("the driver was asked for %s, want the Linux entry", got)
	}
	f.do("DELETE", "/session/"+body["value"].(map[string]any)["sessionId"].(string), "")
	// With no other entry, the request is refused at once, as Grid refuses
	// it: no slot, no start, no driver to refuse it a moment later.
	f.ev.Wait(t, "[SESSION_DELETED]", time.Minute) // the slot is held until the teardown ends
	starts := l.liveCount()
	resp, body = f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","platformName":"Windows 11"}}}`)
	if code, msg := errOf(body); resp.StatusCode != http.StatusBadRequest || code != "invalid argument" || !strings.Contains(msg, "run on Linux") {
		t.Errorf("a Windows-only request: %d %q %q, want 400 saying the browsers run on Linux", resp.StatusCode, code, msg)
	}
	if l.liveCount() != starts || f.q.Stats().InUse != 0 {
		t.Errorf("a Windows-only request started a browser or holds a slot: %+v", f.q.Stats())
	}
}

func TestRetryCountAndStartFailures(t *testing.T) {
	l := &stubLauncher{}
	l.failStarts.Store(1)
	f := newFixture(t, queue.Options{Limit: 1}, Options{RetryCount: 2}, l)
	resp, body := f.do("POST", "/session", w3cChrome)
	if resp.StatusCode != 200 {
		t.Fatalf("second attempt should succeed: %d %v", resp.StatusCode, body)
	}
	if got := testutil.ToFloat64(f.hub.m.startFailures.WithLabelValues("chrome", "start")); got != 1 {
		t.Fatalf("start_failures = %v", got)
	}
	f.do("DELETE", "/session/"+body["value"].(map[string]any)["sessionId"].(string), "")

	l.failStarts.Store(5)
	resp, body = f.do("POST", "/session", w3cChrome)
	if code, msg := errOf(body); resp.StatusCode != 500 || code != "session not created" || !strings.Contains(msg, "engine said no") {
		t.Fatalf("%d %q %q", resp.StatusCode, code, msg)
	}
	l.failStarts.Store(0)
}

// What the client must fix is passed through as 400, not retried, not
// counted as a start failure, and gives its slot back: the driver refusing
// the capabilities, or the launcher finding its options impossible where it
// runs (Kubernetes' limits on a pod).
func TestClientFaultsAtStart(t *testing.T) {
	for _, c := range []struct {
		name, body, msg, phase string
		startErr               error
	}{
		{"the driver refuses", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","wdstub:reject":true}}}`, "refused the new session", "new-session", nil},
		{"the launcher refuses", w3cChrome, "not a DNS label", "start", &launcher.StartError{Phase: launcher.PhaseStart, Browser: "chrome 128.0", Msg: "x",
			Err: &webdriver.ArgumentError{Msg: "containerHostname \"A_B\" is not a DNS label"}}},
	} {
		l := &stubLauncher{startErr: c.startErr}
		f := newFixture(t, queue.Options{Limit: 1}, Options{RetryCount: 3}, l)
		resp, body := f.do("POST", "/session", c.body)
		if code, msg := errOf(body); resp.StatusCode != 400 || code != "invalid argument" || !strings.Contains(msg, c.msg) {
			t.Fatalf("%s: %d %q %q", c.name, resp.StatusCode, code, msg)
		}
		if l.starts.Load() != 1 {
			t.Fatalf("%s: %d starts", c.name, l.starts.Load())
		}
		if got := testutil.ToFloat64(f.hub.m.startFailures.WithLabelValues("chrome", c.phase)); got != 0 {
			t.Fatalf("%s: counted as a start failure: %v", c.name, got)
		}
		if f.q.Stats().InUse != 0 {
			t.Fatalf("%s: the slot was kept", c.name)
		}
	}
}

// A client that leaves while its browser starts: the start is cancelled, nothing
// is answered, the slot goes back.
func TestClientGoneDuringStart(t *testing.T) {
	l := &stubLauncher{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/session", strings.NewReader(w3cChrome))
	errc := make(chan error)
	go func() { _, err := http.DefaultClient.Do(req); errc <- err }()
	<-l.entered // the client is real: wait until its start is under way
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client err %v", err)
	}
	f.ev.Wait(t, "[CLIENT_DISCONNECTED]", time.Minute)
	if f.hub.pending.Load() != 0 {
		t.Fatal("start still pending")
	}
	if st := f.q.Stats(); st.InUse != 0 {
		t.Fatalf("slot leaked: %+v", st)
	}
	close(l.block)
}

func TestCrashedBrowserGivesInvalidSessionID(t *testing.T) {
	l := &stubLauncher{}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	l.mu.Lock()
	var inst *stubInstance
	for i := range l.live {
		inst = i
	}
	l.mu.Unlock()
	inst.crash()
	f.ev.Wait(t, "[BROWSER_EXITED]", time.Minute)
	resp, body := f.do("GET", "/session/"+id+"/url", "")
	if code, msg := errOf(body); resp.StatusCode != 404 || code != "invalid session id" || !strings.Contains(msg, "browser exited") {
		t.Fatalf("%d %q %q", resp.StatusCode, code, msg)
	}
	if st := f.q.Stats(); st.InUse != 0 {
		t.Fatalf("slot held by a crashed session: %+v", st)
	}
}

func TestStatusEndpoints(t *testing.T) {
	full := "3f2a9c0e5b7d4f1a8c6e2b9d0f3a5c7e1b4d6f8a0c2e4b6d8f0a1c3e5b7d9f1a"
	f := newFixture(t, queue.Options{Limit: 2, Timeout: time.Minute}, Options{Version: "v-test"}, &stubLauncher{container: &[2]string{full, "172.30.0.2"}})
	_, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"my test","screenResolution":"1280x1024x24","enableVNC":true,`+
		`"env":["LANG=C"],"labels":{"team":"a"},"timeZone":"UTC","sessionTimeout":"5m","enableLog":true,"logName":"t.log"}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)

	_, st := f.do("GET", "/status", "")
	if st["total"] != 2.0 || st["used"] != 1.0 || st["queued"] != 0.0 || st["pending"] != 0.0 {
		t.Fatalf("status counts %v", st)
	}
	// Grid's readiness beside Selenoid's counts: a slot is free.
	if v, _ := st["value"].(map[string]any); v["ready"] != true || v["message"] == "" {
		t.Errorf("/status value %v, want Grid's ready: true with a message", st["value"])
	}
	chrome := st["browsers"].(map[string]any)["chrome"].(map[string]any)
	if _, ok := chrome["127.0"]; !ok {
		t.Fatal("configured version missing from /status")
	}
	// No version asked: filed under "", as Selenoid files it.
	q := chrome[""].(map[string]any)["unknown"].(map[string]any)
	sess := q["sessions"].([]any)[0].(map[string]any)
	if q["count"] != 1.0 || sess["id"] != id || sess["name"] != "my test" {
		t.Fatalf("sessions %v", q)
	}
	if n := chrome["128.0"].(map[string]any); len(n) != 0 {
		t.Fatalf("a session that asked no version filed under the default too: %v", n)
	}
	// Selenoid's container entry: the full id, and containerInfo.
	ci, _ := sess["containerInfo"].(map[string]any)
	if sess["container"] != full || ci["id"] != full || ci["ip"] != "172.30.0.2" {
		t.Fatalf("container %v, containerInfo %v; want the full id and the address", sess["container"], ci)
	}
	// The client's selenoid:options, at the top of caps as Selenoid merges them.
	c := sess["caps"].(map[string]any)
	if env, _ := c["env"].([]any); len(env) != 1 || env[0] != "LANG=C" || c["timeZone"] != "UTC" || c["sessionTimeout"] != "5m" ||
		c["enableLog"] != true || c["logName"] != "t.log" || c["labels"].(map[string]any)["team"] != "a" {
		t.Fatalf("caps without the client's selenoid:options merged in: %v", c)
	}
	// Selenoid's entry, as selenoid-ui reads it; the stub serves no VNC.
	caps := sess["caps"].(map[string]any)
	if sess["vnc"] != false || sess["screen"] != "1280x1024x24" || caps["name"] != "my test" || caps["version"] != "128.0" ||
		caps["browserName"] != "chrome" || caps["screenResolution"] != "1280x1024x24" || caps["enableVideo"] != false {
		t.Fatalf("Selenoid's session entry: %v", sess)
	}
	for _, p := range []string{"/", "/welcome"} {
		resp, err := http.Get(f.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(text), "You are using WebSummoner v-test") {
			t.Fatalf("%s: %d %q", p, resp.StatusCode, text)
		}
	}
	if resp, body := f.do("GET", "/error", ""); resp.StatusCode != 404 {
		t.Fatalf("/error: %d %v", resp.StatusCode, body)
	} else if code, _ := errOf(body); code != "invalid session id" {
		t.Fatalf("/error: %v", body)
	}
	if qs := st["queue"].(map[string]any); qs["congested"] != false || qs["timeoutSeconds"] != 60.0 {
		t.Fatalf("queue state %v", qs)
	}
	_, w3c := f.do("GET", "/wd/hub/status", "")
	if v := w3c["value"].(map[string]any); v["ready"] != true || v["message"] == "" {
		t.Fatalf("w3c status %v", w3c)
	}
	_, ping := f.do("GET", "/ping", "")
	if ping["version"] != "v-test" || ping["numRequests"].(float64) < 4 || ping["uptime"] == nil || ping["lastReloadTime"] == nil {
		t.Fatalf("ping %v", ping)
	}
	// What monitoring polls is not counted, as by Selenoid; a client's request is.
	for _, p := range []string{"/status", "/wd/hub/status", "/ping", "/healthz"} {
		f.do("GET", p, "")
	}
	if _, again := f.do("GET", "/ping", ""); again["numRequests"] != ping["numRequests"] {
		t.Fatalf("numRequests %v after polling, was %v", again["numRequests"], ping["numRequests"])
	}
	f.do("GET", "/session/unknown/url", "")
	if _, again := f.do("GET", "/ping", ""); again["numRequests"].(float64) != ping["numRequests"].(float64)+1 {
		t.Fatalf("numRequests %v after a command, was %v", again["numRequests"], ping["numRequests"])
	}
	// A new session refused before it passed the queue (every slot busy,
	// no wait) is not counted, as Selenoid counts none.
	_, second := f.do("POST", "/session", w3cChrome) // both slots busy
	_, before := f.do("GET", "/ping", "")
	if resp, _ := f.do("POST", "/session", w3cChrome, "X-Selenoid-No-Wait", ""); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("no-wait on a full grid: %d", resp.StatusCode)
	}
	if _, after := f.do("GET", "/ping", ""); after["numRequests"] != before["numRequests"] {
		t.Fatalf("numRequests %v after a refused no-wait request, was %v", after["numRequests"], before["numRequests"])
	}
	f.do("DELETE", "/session/"+second["value"].(map[string]any)["sessionId"].(string), "")
	if resp, _ := f.do("GET", "/healthz", ""); resp.StatusCode != 200 {
		t.Fatal("healthz")
	}
	if resp, _ := f.do("GET", "/readyz", ""); resp.StatusCode != 200 {
		t.Fatal("readyz")
	}
	f.do("DELETE", "/session/"+id, "")
}

// Draining: new sessions get a JSON 500 with Retry-After; live sessions run on
// until they end or the grace runs out; then everything is stopped.
func TestDrain(t *testing.T) {
	l := &stubLauncher{}
	f := newFixture(t, queue.Options{Limit: 2}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.hub.Drain(ctx); close(done) }()
	f.ev.Wait(t, "[DRAINING]", time.Minute)
	resp, body := f.do("POST", "/session", w3cChrome)
	if code, _ := errOf(body); resp.StatusCode != 500 || code != "session not created" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("while draining: %d %v", resp.StatusCode, body)
	}
	if resp, _ := f.do("GET", "/readyz", ""); resp.StatusCode != 503 {
		t.Fatal("readyz while draining")
	}
	if resp, _ := f.do("GET", "/session/"+id+"/url", ""); resp.StatusCode != 200 {
		t.Fatal("a live session stopped working while draining")
	}
	cancel() // the grace period ends
	<-done
	if l.liveCount() != 0 || f.sess.Len() != 0 {
		t.Fatal("sessions left after drain")
	}
}

func TestNoWaitThroughHub(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1, Timeout: time.Minute}, Options{}, &stubLauncher{})
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	resp, body := f.do("POST", "/session", w3cChrome, "X-Selenoid-No-Wait", "")
	if code, _ := errOf(body); resp.StatusCode != 429 || code != "session not created" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%d %v %v", resp.StatusCode, resp.Header, body)
	}
	f.do("DELETE", "/session/"+id, "")
}

// The driver's new-session call is cut at -session-attempt-timeout and counted as
// a start failure; in fake time.
func TestSessionAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{mem: newMemTransport(), stub: wdstub.Options{NewSessionDelay: time.Hour}}
		f := newFixture(t, queue.Options{Limit: 1}, Options{SessionAttemptTimeout: 200 * time.Millisecond}, l)
		start := time.Now()
		resp, body := f.do("POST", "/session", w3cChrome)
		if code, msg := errOf(body); resp.StatusCode != 500 || code != "session not created" || !strings.Contains(msg, "within -session-attempt-timeout 200ms") {
			t.Fatalf("%d %q %q", resp.StatusCode, code, msg)
		}
		if took := time.Since(start); took != 200*time.Millisecond {
			t.Fatalf("answered after %v", took)
		}
		if got := testutil.ToFloat64(f.hub.m.startFailures.WithLabelValues("chrome", "new-session")); got != 1 {
			t.Fatalf("start_failures{new-session} = %v", got)
		}
	})
}

// A session with no command for -timeout ends, its slot goes back, and a late
// command learns why; a command in between restarts the clock. In fake minutes.
func TestIdleTimeoutThroughHub(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{mem: newMemTransport()}
		f := newFixture(t, queue.Options{Limit: 1}, Options{IdleTimeout: time.Minute}, l)
		_, body := f.do("POST", "/session", w3cChrome)
		id := body["value"].(map[string]any)["sessionId"].(string)
		time.Sleep(50 * time.Second)
		if resp, _ := f.do("GET", "/session/"+id+"/url", ""); resp.StatusCode != 200 {
			t.Fatal("command before the idle timeout failed")
		}
		time.Sleep(59 * time.Second) // 109s since creation, 59s since the command
		if f.sess.Len() != 1 {
			t.Fatal("the command did not restart the idle clock")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		resp, body := f.do("GET", "/session/"+id+"/url", "")
		if code, msg := errOf(body); resp.StatusCode != 404 || code != "invalid session id" || !strings.Contains(msg, "no command came for 1m0s") {
			t.Fatalf("%d %q %q", resp.StatusCode, code, msg)
		}
		if f.q.Stats().InUse != 0 || l.liveCount() != 0 {
			t.Fatal("an idle session kept its slot or driver")
		}
	})
}

// -max-session-lifetime ends a busy session too.
func TestMaxLifetimeThroughHub(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{mem: newMemTransport()}
		f := newFixtureWith(t, queue.Options{Limit: 1}, Options{}, session.Options{MaxLifetime: 10 * time.Minute}, l)
		_, body := f.do("POST", "/session", w3cChrome)
		id := body["value"].(map[string]any)["sessionId"].(string)
		for range 9 {
			time.Sleep(time.Minute)
			if resp, _ := f.do("GET", "/session/"+id+"/url", ""); resp.StatusCode != 200 {
				t.Fatal("busy session ended before its lifetime")
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		resp, body := f.do("GET", "/session/"+id+"/url", "")
		if code, msg := errOf(body); resp.StatusCode != 404 || code != "invalid session id" || !strings.Contains(msg, "-max-session-lifetime") {
			t.Fatalf("%d %q %q", resp.StatusCode, code, msg)
		}
	})
}

func TestSessionTimeoutCappedByMaxTimeout(t *testing.T) {
	h := &Hub{opts: Options{IdleTimeout: time.Minute, MaxTimeout: 10 * time.Minute}}
	for _, c := range []struct{ asked, want time.Duration }{{0, time.Minute}, {5 * time.Minute, 5 * time.Minute}, {time.Hour, 10 * time.Minute}} {
		if got := h.idleFor(webdriver.Options{SessionTimeout: c.asked}); got != c.want {
			t.Errorf("sessionTimeout %v: idle %v, want %v", c.asked, got, c.want)
		}
	}
}

// downLauncher is a launcher whose backend is down (as the Docker launcher reports
// when the engine does not answer): a fault injected here, since the hub test has
// no engine to stop.
type downLauncher struct{ *stubLauncher }

func (downLauncher) Ready() (bool, string) { return false, "Docker engine unreachable: injected" }
func (downLauncher) Check(_ context.Context, b config.Resolved) error {
	return &launcher.StartError{Phase: launcher.PhaseStart, Browser: b.Name, Engine: true, Down: true, Msg: "the Docker engine is unreachable (injected)"}
}

func TestBackendDownFailsFast(t *testing.T) {
	l := &stubLauncher{}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	f.hub.launchers.Process = downLauncher{l}
	resp, body := f.do("GET", "/readyz", "")
	if code, msg := errOf(body); resp.StatusCode != 503 || code == "" || !strings.Contains(msg, "unreachable") {
		t.Fatalf("readyz: %d %v", resp.StatusCode, body)
	}
	resp, body = f.do("POST", "/session", w3cChrome)
	if code, msg := errOf(body); resp.StatusCode != 500 || code != "session not created" || !strings.Contains(msg, "unreachable") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("create: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	if l.starts.Load() != 0 || f.q.Stats().InUse != 0 {
		t.Fatal("a doomed start took a slot or started")
	}
	// Nothing started, so nothing failed: the engine's own alert tells it.
	if got := testutil.ToFloat64(f.hub.m.startFailures.WithLabelValues("chrome", launcher.PhaseStart)); got != 0 {
		t.Fatalf("a refusal of a down engine counted %v start failures", got)
	}
}

// Drain returns the moment the last session ends, not on a polling tick; in fake
// time the two instants are equal.
func TestDrainIsEventDriven(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{mem: newMemTransport()}
		f := newFixture(t, queue.Options{Limit: 2}, Options{}, l)
		_, body := f.do("POST", "/session", w3cChrome)
		id := body["value"].(map[string]any)["sessionId"].(string)
		var drained time.Time
		done := make(chan struct{})
		go func() { f.hub.Drain(context.Background()); drained = time.Now(); close(done) }()
		time.Sleep(5*time.Minute + 50*time.Millisecond) // off any 100ms polling tick
		ended := time.Now()
		f.do("DELETE", "/session/"+id, "")
		<-done
		if !drained.Equal(ended) {
			t.Fatalf("Drain returned %v after the last session ended", drained.Sub(ended))
		}
	})
}

// stopFailing is a stub driver whose stop fails, as a container the engine will
// not remove does: the failure is logged, never lost.
type stopFailing struct{ *stubInstance }

func (s stopFailing) Stop(ctx context.Context) error {
	s.stubInstance.Stop(ctx)
	return errors.New("removing container 3f2a: injected failure")
}

type stopFailingLauncher struct{ *stubLauncher }

func (l stopFailingLauncher) Start(ctx context.Context, r launcher.Request) (launcher.Instance, error) {
	inst, err := l.stubLauncher.Start(ctx, r)
	if err != nil {
		return nil, err
	}
	return stopFailing{inst.(*stubInstance)}, nil
}

func TestStopErrorsAreLogged(t *testing.T) {
	l := &stubLauncher{}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	f.hub.launchers.Process = stopFailingLauncher{l}
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	f.do("DELETE", "/session/"+id, "")
	if line := f.ev.Wait(t, "[SESSION_DELETED]", time.Minute); !strings.Contains(line, "stop failed: removing container 3f2a: injected failure") {
		t.Fatalf("failed stop not logged: %q", line)
	}
	// A start whose driver refuses the session is stopped by the hub itself.
	resp, _ := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","wdstub:reject":true}}}`)
	if resp.StatusCode != 400 {
		t.Fatalf("refused start: %d", resp.StatusCode)
	}
	if line := f.ev.Wait(t, "[STOP_FAILED]", time.Minute); !strings.Contains(line, "injected failure") {
		t.Fatalf("failed stop not logged: %q", line)
	}
}

// The zero Options work: New fills in every default.
func TestZeroOptions(t *testing.T) {
	h, err := New(Options{}, nil, nil, Launchers{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := h.opts
	if o.SessionAttemptTimeout != DefaultSessionAttemptTimeout || o.SessionDeleteTimeout != DefaultSessionDeleteTimeout || o.RetryCount != 1 || o.Transport == nil || o.Version == "" {
		t.Fatalf("defaults %+v", o)
	}
	if _, err := New(Options{RetryCount: -1}, nil, nil, Launchers{}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "-retry-count") {
		t.Fatalf("negative -retry-count: %v", err)
	}
}

// DELETE is answered as soon as the driver has answered its own DELETE; the
// teardown goes on after, holding the slot until it is done, and the session
// is gone for commands from the answer on.
func TestDeleteAnsweredBeforeTeardown(t *testing.T) {
	l := &stubLauncher{stopping: make(chan struct{})}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	if r, body := f.do("DELETE", "/session/"+id, ""); r.StatusCode != 200 || body["value"] != nil {
		t.Fatalf("DELETE while the teardown runs: %d %v", r.StatusCode, body)
	}
	if st := f.q.Stats(); st.InUse != 1 {
		t.Fatalf("slots in use %d during the teardown, want 1: the next browser must not compete with a dying one", st.InUse)
	}
	if r, _ := f.do("GET", "/session/"+id+"/url", ""); r.StatusCode != 404 {
		t.Fatalf("a command after DELETE: %d", r.StatusCode)
	}
	close(l.stopping)
	f.ev.Wait(t, "[SESSION_DELETED]", time.Minute)
	if st := f.q.Stats(); st.InUse != 0 {
		t.Fatalf("slots in use %d after the teardown", st.InUse)
	}
}

// A vendor option the hub does not know is ignored, as Selenoid ignores it:
// the session starts, and the hub logs what it ignored.
func TestUnknownVendorOptionsAreIgnoredAndLogged(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	resp, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"n","moonOnly":true}}}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("an unknown vendor option refused: %d %v", resp.StatusCode, body)
	}
	f.ev.Wait(t, "[IGNORED_OPTIONS] [selenoid:options.moonOnly]", time.Minute)
	f.do("DELETE", "/session/"+body["value"].(map[string]any)["sessionId"].(string), "")
}

// Closing the last window ends a W3C driver's session, and the hub ends its
// own with it, as Grid does: the slot is free for the next request at once,
// not after the idle timeout. A window closed while another is open ends
// nothing.
func TestLastWindowEndsTheSession(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	f.do("POST", "/session/"+id+"/window/new", `{"type":"tab"}`)
	if resp, body := f.do("DELETE", "/session/"+id+"/window", ""); resp.StatusCode != 200 || fmt.Sprint(body["value"]) != "[w1]" {
		t.Fatalf("closing one of two windows: %d %v", resp.StatusCode, body)
	}
	if resp, _ := f.do("GET", "/session/"+id+"/title", ""); resp.StatusCode != 200 {
		t.Fatalf("a command after closing one of two windows: %d, want the session alive", resp.StatusCode)
	}
	if resp, body := f.do("DELETE", "/session/"+id+"/window", ""); resp.StatusCode != 200 || fmt.Sprint(body["value"]) != "[]" {
		t.Fatalf("closing the last window: %d %v, want the driver's empty list", resp.StatusCode, body)
	}
	resp, body := f.do("GET", "/session/"+id+"/title", "")
	if code, msg := errOf(body); resp.StatusCode != 404 || code != "invalid session id" || !strings.Contains(msg, "last window was closed") {
		t.Fatalf("a command after the last window closed: %d %s %q", resp.StatusCode, code, msg)
	}
	// With -limit 1, a second session needs the first one's slot: it queues
	// (no timeout) until the teardown has given the slot back.
	if resp, body := f.do("POST", "/session", w3cChrome); resp.StatusCode != 200 {
		t.Fatalf("a new session after the last window closed: %d %v", resp.StatusCode, body)
	}
	// driver.close() then driver.quit(): the quit finds the session done.
	if resp, body := f.do("DELETE", "/session/"+id, ""); resp.StatusCode != 200 || body["value"] != nil {
		t.Fatalf("DELETE after the last window closed: %d %v, want 200 and null", resp.StatusCode, body)
	}
	if n := sample(t, f, "websummoner_sessions_ended_total", "reason", session.ReasonLastWindow); n != 1 {
		t.Errorf("ended_total{reason=last_window} = %v, want 1", n)
	}
}

// A driver that answers a command that it has no such session (a page
// crash or hang ends chromedriver's and WebKitWebDriver's session, while
// their processes live on) ends the hub's session: the client gets the
// driver's answer, and the slot is free for the next session at once.
func TestDriverEndedSessionFreesTheSlot(t *testing.T) {
	l := &stubLauncher{wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/crash") {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"value":{"error":"invalid session id","message":"session deleted because of page crash or hang","stacktrace":""}}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	}}
	// The queue timeout bounds the wait below should the slot stay held.
	f := newFixture(t, queue.Options{Limit: 1, Timeout: time.Minute}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	if resp, body := f.do("GET", "/session/"+id+"/nosuch", ""); resp.StatusCode != 200 {
		t.Fatalf("a command: %d %v", resp.StatusCode, body)
	}
	resp, body := f.do("POST", "/session/"+id+"/crash", "{}")
	if code, msg := errOf(body); resp.StatusCode != 404 || code != "invalid session id" || !strings.Contains(msg, "page crash") {
		t.Fatalf("the crash: %d %s %q, want the driver's answer", resp.StatusCode, code, msg)
	}
	// With -limit 1 the next session needs the first one's slot: it waits
	// until the hub has ended the first.
	if resp, body := f.do("POST", "/session", w3cChrome); resp.StatusCode != 200 {
		t.Fatalf("a new session after the driver ended the first: %d %v", resp.StatusCode, body)
	}
	resp, body = f.do("GET", "/session/"+id+"/title", "")
	if code, msg := errOf(body); resp.StatusCode != 404 || code != "invalid session id" || !strings.Contains(msg, "its driver ended it") {
		t.Fatalf("a command after: %d %s %q", resp.StatusCode, code, msg)
	}
	if n := sample(t, f, "websummoner_sessions_ended_total", "reason", session.ReasonDriverEnded); n != 1 {
		t.Errorf("ended_total{reason=driver_ended} = %v, want 1", n)
	}
	// driver.quit() in teardown code, after the crash: done, not an error.
	if resp, body := f.do("DELETE", "/session/"+id, ""); resp.StatusCode != 200 || body["value"] != nil {
		t.Fatalf("DELETE after the driver ended the session: %d %v, want 200 and null", resp.StatusCode, body)
	}
}

// A browser killed under a command drops the driver's connection before its
// exit is seen (Docker's die event comes after): the command in flight is
// answered as the next one would be, invalid session id saying the browser
// exited, not unknown error.
func TestCommandInFlightWhenTheBrowserDies(t *testing.T) {
	got := make(chan struct{}, 1)
	l := &stubLauncher{wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/hang") {
				io.Copy(io.Discard, r.Body) // so that the hang-up cancels r's context
				got <- struct{}{}
				<-r.Context().Done()
				return
			}
			next.ServeHTTP(w, r)
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{ExitGrace: time.Minute}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	type answer struct {
		status int
		body   map[string]any
	}
	answered := make(chan answer, 1)
	go func() {
		resp, body := f.do("POST", "/session/"+id+"/hang", "{}") // not retried on a new connection, as a GET is
		answered <- answer{resp.StatusCode, body}
	}()
	<-got
	inst := instanceOf(f, id)
	inst.srv.CloseClientConnections()                // the connection breaks first,
	time.AfterFunc(200*time.Millisecond, inst.crash) // the exit is seen after
	a := <-answered
	if code, msg := errOf(a.body); a.status != http.StatusNotFound || code != "invalid session id" || !strings.Contains(msg, "the browser exited") {
		t.Fatalf("the command in flight when the browser died: %d %s %q", a.status, code, msg)
	}
}

// The grace period's end ends a start under way: its client hears that the
// hub is shutting down (with Retry-After), not what the start met on its way
// down, and Drain does not wait for a start that would go on for its whole
// startup timeout.
func TestGracePeriodEndsAStartUnderWay(t *testing.T) {
	l := &stubLauncher{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	f := newFixture(t, queue.Options{Limit: 1}, Options{SessionDeleteTimeout: time.Hour}, l)
	type answer struct {
		resp *http.Response
		body map[string]any
	}
	answered := make(chan answer, 1)
	go func() {
		resp, body := f.do("POST", "/session", w3cChrome)
		answered <- answer{resp, body}
	}()
	<-l.entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the grace period is over at once
	done := make(chan struct{})
	go func() { f.hub.Drain(ctx); close(done) }()
	a := <-answered
	if code, msg := errOf(a.body); a.resp.StatusCode != 500 || code != "session not created" || !strings.Contains(msg, "shutting down") || a.resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a start under way at the grace period's end: %d %s %q (Retry-After %q)", a.resp.StatusCode, code, msg, a.resp.Header.Get("Retry-After"))
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Drain waited on a start the grace period's end should have ended")
	}
	if st := f.q.Stats(); st.InUse != 0 {
		t.Fatalf("slots held after the drain: %+v", st)
	}
}
