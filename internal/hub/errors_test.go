package hub

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// createErrorCase is one error a client can get from POST /session.
type createErrorCase struct {
	name   string // the docs' wording of the case
	phase  phase
	queue  queue.Options
	hub    Options
	l      func(*stubLauncher)
	prep   func(t *testing.T, f *fixture) // brings the hub into the case's state
	body   string
	header []string
	status int
	code   string
	msg    string // part of the message
	retry  bool   // a Retry-After header
	tag    string // the log line's tag, carrying the request id
}

func createErrorCases() []createErrorCase {
	const chrome = w3cChrome
	// What chrome weighs against -queue-max-bytes.
	chromeWeight := int64(len(chrome)) + webdriver.ValueCost*int64(webdriver.CountValues([]byte(chrome)))
	holdSlot := func(t *testing.T, f *fixture) {
		if resp, _ := f.do("POST", "/session", chrome); resp.StatusCode != 200 {
			t.Fatalf("holding the slot: %d", resp.StatusCode)
		}
	}
	driverAnswers := func(status int, body string) func(*stubLauncher) {
		return func(l *stubLauncher) {
			l.wrap = func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/session") {
						w.WriteHeader(status)
						fmt.Fprint(w, body)
						return
					}
					h.ServeHTTP(w, r)
				})
			}
		}
	}
	return []createErrorCase{
		{name: "a web page of another origin asks (an `Origin` header)", phase: phaseParse, body: chrome, header: []string{"Origin", "http://172.21.0.2:8080"},
			status: 403, code: "session not created", msg: "may not start sessions", tag: "BAD_REQUEST"},
		{name: "body is not JSON", phase: phaseParse, body: `{"capabilities":`,
			status: 400, code: "invalid argument", msg: "not a JSON object", tag: "BAD_REQUEST"},
		{name: "neither capabilities nor desiredCapabilities", phase: phaseParse, body: `{}`,
			status: 400, code: "invalid argument", msg: "neither", tag: "BAD_REQUEST"},
		{name: "body over 32 MiB", phase: phaseParse, body: `{"capabilities":{"alwaysMatch":{"x":"` + strings.Repeat("a", MaxNewSessionBody) + `"}}}`,
			status: 413, code: "invalid argument", msg: "32 MiB", tag: "BAD_REQUEST"},
		{name: "body is not valid UTF-8", phase: phaseParse, body: "{\"capabilities\":{\"alwaysMatch\":{\"browserName\":\"chrome\",\"x\":\"\xff\"}}}",
			status: 400, code: "invalid argument", msg: "not valid UTF-8", tag: "BAD_REQUEST"},
		{name: "body has over 100,000 JSON values", phase: phaseParse, body: `{"capabilities":{"alwaysMatch":{"x":[` + strings.Repeat("0,", 100_000) + `0]}}}`,
			status: 400, code: "invalid argument", msg: "at most 100000", tag: "BAD_REQUEST"},
		{name: "the parses under way hold 192 MiB (or the large bodies being read 128 MiB), and no turn came within a minute", phase: phaseParse, body: chrome,
			prep: func(t *testing.T, f *fixture) {
				if !f.hub.parses.all.TryAcquire(parseBudget) {
					t.Fatal("the parse budget is taken")
				}
				t.Cleanup(func() { f.hub.parses.all.Release(parseBudget) })
			},
			status: 500, code: "session not created", msg: "found no turn within 1m0s", retry: true, tag: "PARSE_BUSY"},
		{name: "no browserName", phase: phaseResolve, body: `{"capabilities":{"alwaysMatch":{}}}`,
			status: 400, code: "invalid argument", msg: "Requested environment is not available: no browserName", tag: "ENVIRONMENT_NOT_AVAILABLE"},
		{name: "browser not configured", phase: phaseResolve, body: `{"capabilities":{"alwaysMatch":{"browserName":"opera"}}}`,
			status: 400, code: "invalid argument", msg: `Requested environment is not available: browser "opera" is not configured; configured: chrome (127.0, 128.0); firefox (1)`, tag: "ENVIRONMENT_NOT_AVAILABLE"},
		{name: "version not configured", phase: phaseResolve, body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","browserVersion":"99"}}}`,
			status: 400, code: "invalid argument", msg: `Requested environment is not available: browser "chrome" version "99" is not configured; configured versions: 127.0, 128.0`, tag: "ENVIRONMENT_NOT_AVAILABLE"},
		{name: "Docker image under -disable-docker", phase: phaseResolve, body: `{"capabilities":{"alwaysMatch":{"browserName":"firefox"}}}`,
			status: 400, code: "invalid argument", msg: "Requested environment is not available: firefox 1: \"image\" \"selenoid/firefox\" is a Docker image, but this hub runs without Docker (-disable-docker)", tag: "ENVIRONMENT_NOT_AVAILABLE"},
		{name: "client env outside the allow-list", phase: phaseCheck, body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"env":["LD_PRELOAD=/tmp/x.so"]}}}}`,
			status: 400, code: "invalid argument", msg: `env "LD_PRELOAD" may not be set`, tag: "BAD_REQUEST"},
		{name: "container networking for a local driver", phase: phaseCheck, body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"hostsEntries":["a.test:127.0.0.1"]}}}}`,
			status: 400, code: "invalid argument", msg: "hostsEntries cannot apply", tag: "BAD_REQUEST"},
		{name: "a vendor option the hub does not support yet", phase: phaseParse, body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"s3KeyPattern":"x"}}}}`,
			status: 400, code: "invalid argument", msg: "not supported by this hub yet", tag: "BAD_REQUEST"},
		{name: "video asked of a local driver process", phase: phaseCheck, body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"enableVideo":true}}}}`,
			status: 400, code: "invalid argument", msg: "no screen to record", tag: "BAD_REQUEST"},
		{name: "the client chooses the browser binary", phase: phaseCheck, body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"binary":"/tmp/evil"}}}}`,
			status: 400, code: "invalid argument", msg: "allowClientBinary", tag: "BAD_REQUEST"},
		{name: "a value that would remove an object or array browsers.json gives (`\"goog:chromeOptions\": \"x\"`)", phase: phaseCheck, body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":"--kiosk"}}}}`,
			status: 400, code: "invalid argument", msg: "goog:chromeOptions.args must be a JSON array", tag: "BAD_REQUEST"},
		{name: "engine unreachable, found before queueing", phase: phaseCheck, body: chrome,
			prep: func(t *testing.T, f *fixture) {
				f.hub.launchers.Process = checkLauncher{f.l, &launcher.StartError{Phase: launcher.PhaseStart, Browser: "chrome 128.0", Engine: true, Down: true, Msg: "the Docker engine is unreachable (injected)"}}
			},
			status: 500, code: "session not created", msg: "unreachable", retry: true, tag: "SESSION_FAILED"},
		{name: "image missing", phase: phaseCheck, body: chrome,
			prep: func(t *testing.T, f *fixture) {
				f.hub.launchers.Process = checkLauncher{f.l, &launcher.StartError{Phase: launcher.PhaseImage, Browser: "chrome 128.0", Msg: "image \"x\" is not on the Docker engine (injected)"}}
			},
			status: 500, code: "session not created", msg: "not on the Docker engine", tag: "SESSION_FAILED"},
		{name: "no-wait header, every slot busy (or promised to waiters, or the tenant at `maxSessions`)", phase: phaseAdmit, queue: queue.Options{Limit: 1, Timeout: time.Minute}, prep: holdSlot,
			body: chrome, header: []string{"X-Selenoid-No-Wait", ""},
			status: 429, code: "session not created", msg: "asked not to wait", retry: true, tag: "QUEUE_NO_WAIT"},
		{name: "no-wait header, a slot free, its start's turn did not come in time ([queue.md](queue.md#every-outcome))", phase: phaseAdmit,
			queue: queue.Options{Limit: 1, Timeout: time.Minute, Gate: closedGate{}, TurnTimeout: 30 * time.Second},
			body:  chrome, header: []string{"X-Selenoid-No-Wait", ""},
			status: 429, code: "session not created", msg: "did not get its turn within 30s", retry: true, tag: "QUEUE_NO_WAIT"},
		{name: "keeping-up budget ran out", phase: phaseAdmit, queue: queue.Options{Limit: 1, Timeout: time.Minute}, prep: holdSlot, body: chrome,
			status: 429, code: "session not created", msg: "-queue-timeout", retry: true, tag: "QUEUE_TIMEOUT"},
		{name: "saturated budget ran out", phase: phaseAdmit, queue: queue.Options{Limit: 1, Timeout: time.Minute},
			prep: func(t *testing.T, f *fixture) { holdSlot(t, f); time.Sleep(2 * time.Minute) }, body: chrome,
			status: 429, code: "session not created", msg: "-queue-congestion-timeout", retry: true, tag: "QUEUE_SHED"},
		{name: "-queue-max requests already wait", phase: phaseAdmit, queue: queue.Options{Limit: 1, Timeout: time.Minute, MaxWaiting: 1},
			prep: func(t *testing.T, f *fixture) {
				holdSlot(t, f)
				go f.do("POST", "/session", chrome) // waits its minute out
				synctest.Wait()
			}, body: chrome,
			status: 429, code: "session not created", msg: "-queue-max", retry: true, tag: "QUEUE_FULL"},
		{name: "the waiters' capabilities with this request's pass -queue-max-bytes", phase: phaseAdmit,
			queue: queue.Options{Limit: 1, Timeout: time.Minute, MaxWaitingBytes: chromeWeight + 1},
			prep: func(t *testing.T, f *fixture) {
				holdSlot(t, f)
				go f.do("POST", "/session", chrome) // waits its minute out, holding chromeWeight
				synctest.Wait()
				if got := f.q.Stats().WaitingBytes; got != chromeWeight {
					t.Fatalf("the waiter holds %d bytes, want its body's %d and %d for each of its values", got, len(chrome), webdriver.ValueCost)
				}
			}, body: chrome,
			status: 429, code: "session not created", msg: "-queue-max-bytes", retry: true, tag: "QUEUE_FULL"},
		{name: "the tenant's maxQueued requests already wait", phase: phaseAdmit,
			queue: queue.Options{Limit: 1, Timeout: time.Minute, Quotas: func() *queue.Quotas { q, _ := queue.ParseQuotas([]byte(`{"*": {"maxQueued": 1}}`)); return q }()},
			prep: func(t *testing.T, f *fixture) {
				holdSlot(t, f)
				go f.do("POST", "/session", chrome) // waits its minute out
				synctest.Wait()
			}, body: chrome,
			status: 429, code: "session not created", msg: "maxQueued", retry: true, tag: "QUEUE_QUOTA"},
		{name: "-disable-queue, every slot busy", phase: phaseAdmit, queue: queue.Options{Limit: 1, Disabled: true}, prep: holdSlot, body: chrome,
			status: 500, code: "session not created", msg: "-disable-queue", tag: "QUEUE_DISABLED"},
		{name: "-disable-queue, a slot free, its start's turn did not come in time", phase: phaseAdmit,
			queue: queue.Options{Limit: 1, Disabled: true, Gate: closedGate{}, TurnTimeout: 30 * time.Second}, body: chrome,
			status: 500, code: "session not created", msg: "did not get its turn within 30s", tag: "QUEUE_DISABLED"},
		{name: "the hub is draining", phase: phaseAdmit, prep: func(t *testing.T, f *fixture) { f.hub.queue.Close() }, body: chrome,
			status: 500, code: "session not created", msg: "shutting down", retry: true, tag: "QUEUE_CLOSED"},
		{name: "the browser failed to start", phase: phaseStart, body: chrome,
			l: func(l *stubLauncher) {
				l.startErr = &launcher.StartError{Phase: launcher.PhaseStartup, Browser: "chrome 128.0", Engine: true, Msg: "driver did not answer within -service-startup-timeout 30s"}
			},
			status: 500, code: "session not created", msg: "-service-startup-timeout", tag: "SESSION_FAILED"},
		{name: "the launcher finds the client's options impossible where it runs (a pod's hostname or nameservers)", phase: phaseStart, body: chrome,
			l: func(l *stubLauncher) {
				l.startErr = &launcher.StartError{Phase: launcher.PhaseStart, Browser: "chrome 128.0", Msg: "x", Err: &webdriver.ArgumentError{Msg: "dnsServers has 4 entries; a pod takes at most 3"}}
			},
			status: 400, code: "invalid argument", msg: "a pod takes at most 3", tag: "BAD_REQUEST"},
		{name: "engine unreachable during the start", phase: phaseStart, body: chrome,
			l: func(l *stubLauncher) {
				l.startErr = &launcher.StartError{Phase: launcher.PhaseStart, Browser: "chrome 128.0", Engine: true, Down: true, Msg: "the Docker engine is unreachable"}
			},
			status: 500, code: "session not created", msg: "unreachable", retry: true, tag: "SESSION_FAILED"},
		{name: "the driver refused the capabilities", phase: phaseStart, body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","wdstub:reject":true}}}`,
			status: 400, code: "invalid argument", msg: "chrome 128.0: the driver refused the new session", tag: "SESSION_FAILED"},
		{name: "the driver failed the new session", phase: phaseStart, body: chrome, l: func(l *stubLauncher) { l.stub.FailNewSession = true },
			status: 500, code: "session not created", msg: "the driver refused the new session", tag: "SESSION_FAILED"},
		{name: "the driver answered an error that is not W3C", phase: phaseStart, body: chrome, l: driverAnswers(502, "<html>bad gateway</html>"),
			status: 500, code: "session not created", msg: "answered 502", tag: "SESSION_FAILED"},
		{name: "the driver's answer has no session id", phase: phaseStart, body: chrome, l: driverAnswers(200, `{"value":{}}`),
			status: 500, code: "session not created", msg: "no sessionId", tag: "SESSION_FAILED"},
		{name: "the driver's answer is over 16 MiB", phase: phaseStart, body: chrome, l: driverAnswers(200, `{"value":{"sessionId":"x","capabilities":{"a":"`+strings.Repeat("a", 16<<20)+`"}}}`),
			status: 500, code: "session not created", msg: "larger than 16 MiB", tag: "SESSION_FAILED"},
		{name: "the driver took longer than -session-attempt-timeout", phase: phaseStart, body: chrome,
			hub: Options{SessionAttemptTimeout: 10 * time.Second}, l: func(l *stubLauncher) { l.stub.NewSessionDelay = time.Hour },
			status: 500, code: "session not created", msg: "within -session-attempt-timeout 10s", tag: "SESSION_FAILED"},
		{name: "the grace period ended during the start", phase: phaseRegister, body: chrome,
			l: func(l *stubLauncher) { l.block, l.entered = make(chan struct{}), make(chan struct{}, 1) },
			prep: func(t *testing.T, f *fixture) {
				go func() {
					<-f.l.entered
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					go f.hub.Drain(ctx) // the grace is over at once; this start is still under way
					synctest.Wait()
					close(f.l.block)
				}()
			},
			status: 500, code: "session not created", msg: "shutting down", retry: true, tag: "SESSION_FAILED"},
	}
}

// checkLauncher injects what a launcher's Check says: the engine's state is a
// fault the hub test has no engine to produce.
type checkLauncher struct {
	*stubLauncher
	err error
}

func (c checkLauncher) Check(context.Context, config.Resolved) error { return c.err }

// Every error a client can get from POST /session, with its status, W3C code,
// Retry-After and log tag, each in fake time; and docs/hub.md lists exactly these.
func TestCreateErrorTable(t *testing.T) {
	for _, c := range createErrorCases() {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := &stubLauncher{mem: newMemTransport()}
				if c.l != nil {
					c.l(l)
				}
				if c.queue.Limit == 0 {
					c.queue.Limit = 2
				}
				f := newFixture(t, c.queue, c.hub, l)
				if c.prep != nil {
					c.prep(t, f)
				}
				resp, body := f.do("POST", "/session", c.body, c.header...)
				code, msg := errOf(body)
				if resp.StatusCode != c.status || code != c.code || !strings.Contains(msg, c.msg) {
					t.Errorf("%d %q %q; want %d %q containing %q", resp.StatusCode, code, msg, c.status, c.code, c.msg)
				}
				if ra := resp.Header.Get("Retry-After"); c.retry {
					if n, err := strconv.Atoi(ra); err != nil || n < 1 {
						t.Errorf("Retry-After %q, want whole seconds ≥ 1", ra)
					}
				} else if ra != "" {
					t.Errorf("Retry-After %q on a refusal that has none", ra)
				}
				checkTagged(t, f, c.tag)
				if c.tag != "PARSE_BUSY" { // that case holds it all
					if !f.hub.reads.all.TryAcquire(readBudget) || !f.hub.parses.all.TryAcquire(parseBudget) {
						t.Error("the request kept its share of the read or parse budget")
					}
				}
				f.hub.queue.Close()
				f.sess.EndAll("shutdown")
			})
		})
	}
}

// checkTagged finds the case's log line and checks that it carries the id of a
// request that was logged as NEW_REQUEST.
func checkTagged(t *testing.T, f *fixture, tag string) {
	t.Helper()
	ids := map[string]bool{}
	re := regexp.MustCompile(`^\[([^]]+)\] \[([A-Z_]+)\]`)
	for {
		select {
		case line := <-f.ev:
			m := re.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[2] == "NEW_REQUEST" {
				ids[m[1]] = true
			}
			if m[2] == tag {
				if !ids[m[1]] {
					t.Errorf("%s logged without its request's id: %q", tag, line)
				}
				return
			}
		default:
			t.Errorf("no [%s] line logged", tag)
			return
		}
	}
}

// docs/hub.md's error table is this list: one row per case, naming its phase,
// status, code, Retry-After and log tag.
func TestErrorTableIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/hub.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range createErrorCases() {
		retry := "—"
		if c.retry {
			retry = "yes"
		}
		row := fmt.Sprintf("| %s | %s | %d | `%s` | %s | `[%s]` |", c.name, c.phase, c.status, c.code, retry, c.tag)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/hub.md lacks the row\n%s", row)
		}
	}
}

// A driver's refusal that is no W3C error answer — a JSONWire one (200 with a
// non-zero status, often with a sessionId) or an error body under a status that
// is no error — is a failed start: 500 session not created with the driver's
// message, no session made of it, the browser stopped and the slot given back.
func TestDriverRefusalsThatAreNoErrorStatus(t *testing.T) {
	cases := []struct {
		status int
		body   string
		msg    string
	}{
		{200, `{"sessionId":"s-1","status":33,"value":{"message":"session not created: Chrome failed to start"}}`, "Chrome failed to start"},
		{200, `{"sessionId":null,"status":13,"value":"broken"}`, "JSONWire status 13"},
		{201, `{"value":{"error":"session not created","message":"odd"}}`, "answered 201"},
		{302, `{"value":{"error":"session not created","message":"odd"}}`, "answered 302"},
	}
	for _, c := range cases {
		l := &stubLauncher{mem: newMemTransport(), wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == "/session" {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(c.status)
					_, _ = io.WriteString(w, c.body)
					return
				}
				h.ServeHTTP(w, r)
			})
		}}
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
			resp, body := f.do("POST", "/session", w3cChrome)
			v, _ := body["value"].(map[string]any)
			if resp.StatusCode != http.StatusInternalServerError || v["error"] != "session not created" || !strings.Contains(fmt.Sprint(v["message"]), c.msg) {
				t.Errorf("driver %d %s: hub %d %v", c.status, c.body, resp.StatusCode, body)
			}
			synctest.Wait()
			if f.sess.Len() != 0 || f.q.Stats().InUse != 0 || l.liveCount() != 0 {
				t.Errorf("driver %d: %d sessions, %d slots, %d browsers left", c.status, f.sess.Len(), f.q.Stats().InUse, l.liveCount())
			}
		})
	}
}

// closedGate is a start gate that permits no start, as the adaptive gate
// while the Docker engine does not answer.
type closedGate struct{}

func (closedGate) TryStart(int) bool                                          { return false }
func (closedGate) CanStart(int) bool                                          { return false }
func (closedGate) Notify(func())                                              {}
func (closedGate) FinishStart(int, string, queue.StartOutcome, time.Duration) {}

// A page of the hub's own origin may start a session (Origin names the Host
// it came to); a page elsewhere, even one naming the hub's address with
// another port or scheme-less, may not: a WebDriver client sends no Origin.
func TestNewSessionFromAPage(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 3}, Options{}, &stubLauncher{})
	host := strings.TrimPrefix(f.srv.URL, "http://")
	if resp, body := f.do("POST", "/session", w3cChrome, "Origin", "http://"+host); resp.StatusCode != 200 {
		t.Fatalf("the hub's own origin: %d %v", resp.StatusCode, body)
	}
	for _, o := range []string{"null", "http://evil.test", "http://" + strings.Split(host, ":")[0] + ":1", host} {
		for _, ct := range []string{"text/plain", "", "application/x-www-form-urlencoded"} {
			if resp, body := f.do("POST", "/session", w3cChrome, "Origin", o, "Content-Type", ct); resp.StatusCode != 403 {
				t.Errorf("Origin %q, Content-Type %q: %d %v, want 403", o, ct, resp.StatusCode, body)
			}
		}
	}
	if st := f.q.Stats(); st.InUse != 1 {
		t.Fatalf("slots in use %d, want the one session", st.InUse)
	}
	// JSON, which a page of another origin sends only after a preflight the
	// hub does not grant (selenoid-ui's page, through its own proxy); and a
	// proxy in front that says which Host the page saw.
	if resp, body := f.do("POST", "/session", w3cChrome, "Origin", "http://ui.test:8080", "Content-Type", "application/json; charset=utf-8"); resp.StatusCode != 200 {
		t.Fatalf("JSON from a page: %d %v", resp.StatusCode, body)
	}
	if resp, body := f.do("POST", "/session", w3cChrome, "Origin", "https://grid.test", "X-Forwarded-Host", "grid.test:443", "Content-Type", "text/plain"); resp.StatusCode != 200 {
		t.Fatalf("a page of the origin a proxy names: %d %v", resp.StatusCode, body)
	}
}

// Options the launcher could not start a browser with (Kubernetes' checks of
// what the API server would refuse) are refused before the request queues:
// on a full grid the client heard its mistake only after a wait for a slot.
func TestLauncherRefusesOptionsBeforeQueueing(t *testing.T) {
	l := &stubLauncher{checkOptions: func(o webdriver.Options) error {
		if len(o.Env) > 0 {
			return &webdriver.ArgumentError{Msg: "env \"Ä=1\" is not a variable name"}
		}
		return nil
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	resp, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"env":["LANG=C.UTF-8"]}}}}`,
		"X-WebSummoner-No-Wait", "1") // queued, it would be refused as the grid is full

	if e, m := errOf(body); resp.StatusCode != 400 || e != "invalid argument" || !strings.Contains(m, "variable name") {
		t.Fatalf("refused options on a full grid: %d %v, want 400 at once", resp.StatusCode, body)
	}
	if st := f.q.Stats(); st.Waiting != 0 {
		t.Fatalf("%d requests queued", st.Waiting)
	}
	f.do("DELETE", "/session/"+id, "")
}
