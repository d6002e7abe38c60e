package hub

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
)

// /status hides another user's session container (a container id and
// address, or a local driver's pid and port) as it hides its name and capabilities; its owner and
// an operator see it.
func TestStatusHidesOthersContainer(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 2}, Options{Auth: authStore(t, "ops")}, &stubLauncher{container: &[2]string{"c0ffee", "172.30.0.9"}})
	_, _, body := as(t, f, "alice", "POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"alice's"}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)
	entry := func(user string) map[string]any {
		t.Helper()
		_, _, st := as(t, f, user, "GET", "/status", "")
		quota := "alice"
		if user == "bob" {
			quota = "unknown"
		}
		return st["browsers"].(map[string]any)["chrome"].(map[string]any)[""].(map[string]any)[quota].(map[string]any)["sessions"].([]any)[0].(map[string]any)
	}
	if e := entry("bob"); e["id"] != id || e["container"] != "" || e["containerInfo"] != nil || e["name"] != nil || e["caps"] != nil {
		t.Errorf("bob's /status shows alice's session as %v; want only its id", e)
	}
	for _, u := range []string{"alice", "ops"} {
		e := entry(u)
		if c, _ := e["container"].(string); c != "c0ffee" || e["containerInfo"] == nil {
			t.Errorf("%s's /status hides the session's container: %v", u, e)
		}
	}
}

// A session being started is pending, not used, as Selenoid counts it: total
// - used - pending is the free slots.
func TestStatusCountsAStartAsPendingOnly(t *testing.T) {
	l := &stubLauncher{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	f := newFixture(t, queue.Options{Limit: 2}, Options{}, l)
	created := make(chan struct{})
	go func() {
		defer close(created)
		f.do("POST", "/session", w3cChrome)
	}()
	<-l.entered
	_, st := f.do("GET", "/status", "")
	if st["used"] != 0.0 || st["pending"] != 1.0 || st["total"] != 2.0 {
		t.Errorf("during the start: used %v pending %v total %v, want 0, 1, 2", st["used"], st["pending"], st["total"])
	}
	close(l.block)
	<-created
	if _, st = f.do("GET", "/status", ""); st["used"] != 1.0 || st["pending"] != 0.0 {
		t.Errorf("after the start: used %v pending %v, want 1, 0", st["used"], st["pending"])
	}
}

// selenoidCapsFields are the JSON names of Selenoid's session.Caps
// (session/session.go), all a /status entry's caps may have.
var selenoidCapsFields = []string{"browserName", "deviceName", "version", "browserVersion", "platform", "platformName",
	"appium:deviceName", "screenResolution", "skin", "enableVNC", "enableVideo", "enableLog", "videoName", "videoScreenSize",
	"videoFrameRate", "videoCodec", "logName", "name", "timeZone", "containerHostname", "env", "applicationContainers",
	"additionalNetworks", "hostsEntries", "dnsServers", "labels", "sessionTimeout", "s3KeyPattern", "selenoid:options"}

// A /status entry's caps are Selenoid's fields, with the session's values,
// and nothing else: a session with a 1 MiB extension yields a small /status.
func TestStatusCapsAreSelenoidsFields(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 2}, Options{}, &stubLauncher{})
	ext := strings.Repeat("A", 1<<20)
	body := `{"capabilities":{"alwaysMatch":{"browserName":"chrome","browserVersion":"127","platformName":"linux",` +
		`"goog:chromeOptions":{"extensions":["` + ext + `"],"args":["--lang=de"]},"acceptInsecureCerts":true,` +
		`"selenoid:options":{"name":"checkout","enableVNC":true,"screenResolution":"1280x1024x24","sessionTimeout":"5m","timeZone":"Europe/Berlin",` +
		`"env":["LANG=de_DE.UTF-8"],"labels":{"team":"qa"},"enableLog":true,"logName":"checkout.log","nmae":"` + ext + `"}}}}`
	if resp, answer := f.do("POST", "/session", body); resp.StatusCode != 200 {
		t.Fatalf("create: %d %v", resp.StatusCode, answer)
	}
	resp, err := http.Get(f.srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(raw) > 16<<10 {
		t.Fatalf("/status is %d bytes for one session; want a few KiB without the client's extension", len(raw))
	}
	var st struct {
		Browsers map[string]map[string]map[string]struct {
			Sessions []struct {
				Caps map[string]any `json:"caps"`
			} `json:"sessions"`
		} `json:"browsers"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	sessions := st.Browsers["chrome"]["127"]["unknown"].Sessions
	if len(sessions) != 1 {
		t.Fatalf("/status: %s", raw)
	}
	c := sessions[0].Caps
	for k := range c {
		if !slices.Contains(selenoidCapsFields, k) {
			t.Errorf("caps has %q, which Selenoid's session.Caps has not", k)
		}
	}
	want := map[string]any{"browserName": "chrome", "version": "127.0", "browserVersion": "127", "platformName": "linux", "name": "checkout",
		"enableVNC": true, "enableVideo": false, "screenResolution": "1280x1024x24", "sessionTimeout": "5m", "timeZone": "Europe/Berlin",
		"enableLog": true, "logName": "checkout.log"}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("caps[%q] = %#v, want %#v", k, c[k], v)
		}
	}
	if env, _ := c["env"].([]any); len(env) != 1 || env[0] != "LANG=de_DE.UTF-8" {
		t.Errorf("caps.env = %#v", c["env"])
	}
	if l, _ := c["labels"].(map[string]any); len(l) != 1 || l["team"] != "qa" {
		t.Errorf("caps.labels = %#v", c["labels"])
	}
}

// /status files a session under its quota, as Selenoid does: its owner under
// -htpasswd (Selenoid's basic-auth user), seen so by the owner and the
// operators; to another user, and without authentication, "unknown".
func TestStatusQuotaIsTheOwner(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 4}, Options{Auth: authStore(t, "ops")}, &stubLauncher{})
	for _, u := range []string{"alice", "alice", "bob"} {
		if status, _, body := as(t, f, u, "POST", "/session", w3cChrome); status != 200 {
			t.Fatalf("%s's session: %d %v", u, status, body)
		}
	}
	quotas := func(user string) map[string]float64 {
		t.Helper()
		_, _, st := as(t, f, user, "GET", "/status", "")
		out := map[string]float64{}
		for q, e := range st["browsers"].(map[string]any)["chrome"].(map[string]any)[""].(map[string]any) {
			out[q] = e.(map[string]any)["count"].(float64)
		}
		return out
	}
	for user, want := range map[string]map[string]float64{
		"ops":   {"alice": 2, "bob": 1},
		"alice": {"alice": 2, "unknown": 1},
		"bob":   {"bob": 1, "unknown": 2},
	} {
		if got := quotas(user); !maps.Equal(got, want) {
			t.Errorf("%s's /status quotas %v, want %v", user, got, want)
		}
	}
	// Without -htpasswd, as Selenoid: the basic-auth user the request named,
	// unchecked (ggr in front names one), and "unknown" for none.
	open := newFixture(t, queue.Options{Limit: 3}, Options{}, &stubLauncher{})
	open.do("POST", "/session", w3cChrome)
	open.do("POST", "/session", w3cChrome, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("team-a:anything")))
	// A name of a header's length is not shown to every /status: unknown.
	open.do("POST", "/session", w3cChrome, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(strings.Repeat("n", 64<<10)+":x")))
	_, st := open.do("GET", "/status", "")
	if q := st["browsers"].(map[string]any)["chrome"].(map[string]any)[""].(map[string]any); len(q) != 2 || q["unknown"] == nil || q["team-a"] == nil {
		t.Errorf("without -htpasswd, quotas %v; want \"unknown\" and the basic-auth user \"team-a\"", q)
	}
}

// /status gives a session's screen as Selenoid does, WIDTHxHEIGHTxDEPTH:
// the one asked for with its depth, or a container's default when none was
// asked; a local driver asked for none has no such screen.
func TestStatusScreenAsSelenoid(t *testing.T) {
	screenOf := func(l *stubLauncher, body string) (string, string) {
		t.Helper()
		f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
		if resp, b := f.do("POST", "/session", body); resp.StatusCode != 200 {
			t.Fatalf("new session: %d %v", resp.StatusCode, b)
		}
		_, st := f.do("GET", "/status", "")
		var e map[string]any
		for _, versions := range st["browsers"].(map[string]any)["chrome"].(map[string]any) {
			for _, q := range versions.(map[string]any) {
				e = q.(map[string]any)["sessions"].([]any)[0].(map[string]any)
			}
		}
		caps, _ := e["caps"].(map[string]any)["screenResolution"].(string) // omitted when ""
		return e["screen"].(string), caps
	}
	asked := `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"screenResolution":"1280x1024"}}}}`
	for _, c := range []struct {
		l          *stubLauncher
		body, want string
	}{
		{&stubLauncher{container: &[2]string{"c0ffee", "172.30.0.9"}}, w3cChrome, "1920x1080x24"},
		{&stubLauncher{container: &[2]string{"c0ffee", "172.30.0.9"}}, asked, "1280x1024x24"},
		{&stubLauncher{}, asked, "1280x1024x24"},
		{&stubLauncher{}, w3cChrome, ""},
	} {
		if screen, caps := screenOf(c.l, c.body); screen != c.want || caps != c.want {
			t.Errorf("container %v, %s: screen %q, caps.screenResolution %q; want %q", c.l.container != nil, c.body, screen, caps, c.want)
		}
	}
}
