package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// webkitSeen is what testdata/webkit.py saw.
type webkitSeen struct {
	Session, Visited, Title, Typed, Agent, Upload, UploadName, PNG string
	CDP                                                            *string
	Window                                                         struct{ Width, Height int }
}

// requireWebKit skips without WebKitGTK's driver and Ruby's client, and
// fails in CI, where scripts/deps.sh installs them.
func requireWebKit(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"WebKitWebDriver", "xvfb-run", "ruby"} {
		requireTool(t, tool)
	}
}

// checkWebKit asserts what every WebKit session must show: the page typed
// into, a Safari engine's user agent, the file uploaded, the window at the
// screen's size, no DevTools, and a screenshot of the page's colour.
func checkWebKit(t *testing.T, s webkitSeen, w, h int) {
	t.Helper()
	if s.Title != "webkit" || s.Typed != "typed in WebKit" {
		t.Errorf("page: title %q, typed %q", s.Title, s.Typed)
	}
	if !strings.Contains(s.Agent, "AppleWebKit") || strings.Contains(s.Agent, "Chrome") {
		t.Errorf("user agent %q is not WebKit's", s.Agent)
	}
	if want := s.UploadName + ":24"; s.Upload != want {
		t.Errorf("file input holds %q, want %q (the uploaded file, 24 bytes)", s.Upload, want)
	}
	if s.Window.Width != w || s.Window.Height != h {
		t.Errorf("window %dx%d, want the screen's %dx%d", s.Window.Width, s.Window.Height, w, h)
	}
	if s.CDP != nil {
		t.Errorf("se:cdp %q offered for WebKit, which has no DevTools endpoint", *s.CDP)
	}
	data, _ := base64.StdEncoding.DecodeString(s.PNG)
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	r, g, bl, _ := img.At(b.Dx()/2, b.Dy()/2).RGBA()
	if got := [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}; !near(got, [3]int{0, 128, 255}) {
		t.Errorf("screenshot's centre is %v, want the page's rgb(0,128,255)", got)
	}
}

// WebKit as a local driver process (config/browsers.local.json: MiniBrowser
// on a virtual screen of its own) with Python's and Ruby's Selenium.
func TestLocalWebKit(t *testing.T) {
	requireRealParts(t)
	requireWebKit(t)
	h := startHub(t, "-limit", "2")
	pythonWebKit(t, h)

	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	rb, err := exec.CommandContext(ctx, "ruby", "testdata/webkit.rb", h.url+"/wd/hub").CombinedOutput()
	if err != nil {
		t.Fatalf("ruby client: %v %s", err, rb)
	}
	f := strings.Split(strings.TrimSpace(string(rb)), "|")
	if len(f) != 4 || f[1] != "from ruby" || f[2] != "typed by ruby" || !strings.Contains(f[3], "AppleWebKit") {
		t.Fatalf("ruby client saw %q", rb)
	}
	h.stop(t)
	if left := ourProcesses(h.instance); len(left) != 0 {
		t.Fatalf("processes of WebKit sessions left (Xvfb, MiniBrowser): %v", left)
	}
}

// WebKit as a local driver in the process sandbox (-process-sandbox on, as
// -htpasswd makes it): WebKitWebDriver reaches MiniBrowser on the sandbox's
// own loopback, and MiniBrowser's pages go out through the sandbox's proxy
// (its --proxy flag), to a page on the host's loopback that the sandbox's
// own loopback does not have. Everything else a local WebKit session does
// works as unsandboxed, and nothing of it is left.
func TestSandboxedWebKit(t *testing.T) {
	requireRealParts(t)
	requireWebKit(t)
	requireTool(t, "bwrap")
	h := startHub(t, "-limit", "1", "-process-sandbox", "on")
	if !strings.Contains(h.logs.String(), "[SANDBOX]") {
		t.Fatal("the hub did not say its drivers are sandboxed: the test would prove nothing")
	}
	page := pageServer(t)
	s := pythonWebKit(t, h, page.URL)
	if s.Visited != "WebSummoner e2e" {
		t.Errorf("the sandboxed MiniBrowser loaded %s with title %q, want the page's (through the sandbox's proxy)", page.URL, s.Visited)
	}
	h.stop(t)
	if left := ourProcesses(h.instance); len(left) != 0 {
		t.Fatalf("processes of sandboxed WebKit sessions left (bubblewrap, Xvfb, MiniBrowser): %v", left)
	}
}

// pythonWebKit runs testdata/webkit.py against h, visiting visit first (if
// given), checks the live session's side endpoints and what the client saw
// (checkWebKit), and returns that.
func pythonWebKit(t *testing.T, h *hub, visit ...string) webkitSeen {
	t.Helper()
	client := startWaitingClient(t, "testdata/webkit.py", append([]string{h.url + "/wd/hub", "1280x1024x24", "wait"}, visit...)...)
	var created struct{ Created string }
	if err := json.Unmarshal([]byte(client.out.Text()), &created); err != nil || created.Created == "" {
		t.Fatalf("python client's first line %q: %v", client.out.Text(), err)
	}
	// While the session lives: /devtools/ says WebKit has none.
	status := call(t, "GET", h.url+"/devtools/"+created.Created+"/json/version", "")
	if status.status < 400 || status.Value.Error == "" || !strings.Contains(status.Value.Message, "WebKit") {
		t.Errorf("/devtools/ of a WebKit session: %d %+v, want a W3C error saying WebKit has none", status.status, status.Value)
	}
	// MiniBrowser saves to its XDG download directory, the session's own.
	if !waitFor(30*time.Second, func() bool {
		return strings.Contains(string(rawCall(t, "GET", h.url+"/download/"+created.Created+"/?json", "")), `"wk-dl.txt"`)
	}) {
		t.Errorf("WebKit's download never appeared at /download/%s/: %s", created.Created, rawCall(t, "GET", h.url+"/download/"+created.Created+"/?json", ""))
	} else if got := rawCall(t, "GET", h.url+"/download/"+created.Created+"/wk-dl.txt", ""); string(got) != "downloaded" {
		t.Errorf("the download's bytes: %q", got)
	}
	var s webkitSeen
	if last := client.finish(t); json.Unmarshal([]byte(last), &s) != nil {
		t.Fatalf("python client output %q", last)
	}
	checkWebKit(t, s, 1280, 1024)
	return s
}
