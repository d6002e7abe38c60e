package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// WebKit in a container: the project's WebKit image (images/webkit: WebKitGTK's
// MiniBrowser through WebKitWebDriver, headed on Xvfb) run by the hub from the
// shipped config/browsers.docker.json, driven by Python Selenium's
// WebKitGTKOptions, watched over VNC and recorded.

var (
	webkitOnce sync.Once
	webkitTag  string
	webkitErr  error
)

// requireWebKitImage is requireDocker and the WebKit image, built once a run
// (cached by tag after the first build).
func requireWebKitImage(t *testing.T) {
	t.Helper()
	requireDocker(t)
	if err := exec.Command(python, "-c", "from selenium import webdriver; webdriver.WebKitGTKOptions").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3-selenium with WebKitGTKOptions is required in CI:", err)
		}
		t.Skip("no python3-selenium with WebKitGTKOptions:", err)
	}
	webkitOnce.Do(func() { webkitTag, webkitErr = lastLine("../images/webkit/build.sh") })
	if webkitErr != nil {
		t.Fatal(webkitErr)
	}
}

// shippedDockerConfig checks that config/browsers.docker.json names the image
// this run built for WebKit, under its three names with the same content, and
// returns a browsers.json of its entries as shipped, but for chrome's image:
// the one this run built (the Chromium image's own staleness is
// internal/config's TestShippedExamples').
func shippedDockerConfig(t *testing.T) string {
	t.Helper()
	const shipped = "../config/browsers.docker.json"
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	var bs map[string]map[string]any
	if err := json.Unmarshal(data, &bs); err != nil {
		t.Fatalf("%s: %v", shipped, err)
	}
	version := func(name string) map[string]any {
		v, _ := bs[name]["versions"].(map[string]any)[fmt.Sprint(bs[name]["default"])].(map[string]any)
		return v
	}
	for _, name := range []string{"MiniBrowser", "webkit", "webkitgtk"} {
		v := version(name)
		if bs[name]["default"] != "2.50" || v == nil || v["image"] != webkitTag {
			t.Fatalf("%s: %q has default %v, image %v; images/webkit/build.sh builds %s", shipped, name, bs[name]["default"], v["image"], webkitTag)
		}
		if !reflect.DeepEqual(bs[name], bs["MiniBrowser"]) {
			t.Fatalf("%s: %q differs from MiniBrowser: %v", shipped, name, bs[name])
		}
	}
	chrome := version("chrome")
	if chrome == nil {
		t.Fatalf("%s: no chrome entry", shipped)
	}
	chrome["image"] = chromeTag
	out, _ := json.Marshal(bs)
	conf := filepath.Join(t.TempDir(), "browsers.json")
	if err := os.WriteFile(conf, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}

// webkitDockerSeen is what testdata/webkit_docker.py saw.
type webkitDockerSeen struct {
	Session    string         `json:"session"`
	Caps       map[string]any `json:"caps"`
	Value      string         `json:"value"`
	UserAgent  string         `json:"userAgent"`
	Upload     string         `json:"upload"`
	UploadWant string         `json:"uploadWant"`
	Window     [2]int         `json:"window"`
	Maximized  [2]int         `json:"maximized"`
}

// pngColourAt decodes a PNG file and returns the colour at (x, y).
func pngColourAt(t *testing.T, file string, x, y int) (got [3]int, w, h int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", file, err)
	}
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]int{int(r >> 8), int(g >> 8), int(b >> 8)}, img.Bounds().Dx(), img.Bounds().Dy()
}

// vncColourAt reads the screen over VNC through the hub until the pixel at
// (x, y) is want, a minute at most (x11vnc finds changes by polling the
// screen), and returns the last colour read.
func vncColourAt(t *testing.T, vnc *rfbClient, x, y int, want [3]int) [3]int {
	t.Helper()
	var got [3]int
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		px, err := vnc.frame()
		if err != nil {
			t.Fatal("framebuffer update:", err)
		}
		p := px[y*vnc.width+x]
		if got = [3]int{int(p >> 16 & 255), int(p >> 8 & 255), int(p & 255)}; near(got, want) {
			break
		}
	}
	return got
}

// titleRoundTrip opens a page titled name in a session and reads the title
// back.
func titleRoundTrip(t *testing.T, hubURL, id, name string) string {
	t.Helper()
	if r := call(t, "POST", hubURL+"/wd/hub/session/"+id+"/url", `{"url":"data:text/html,<title>`+name+`</title>"}`); r.status != 200 {
		t.Fatalf("navigate %s: %d %s", id, r.status, r.Value.Message)
	}
	var v struct{ Value string }
	if err := json.Unmarshal(rawCall(t, "GET", hubURL+"/wd/hub/session/"+id+"/title", ""), &v); err != nil {
		t.Fatal(err)
	}
	return v.Value
}

// TestDockerWebKit: Python Selenium's WebKitGTKOptions (no binary: the entry's
// caps give it) through the hub into the WebKit image; the session's screen
// over VNC; its downloads; a Chromium session beside it; a recorded session.
// Every container goes with the test.
func TestDockerWebKit(t *testing.T) {
	requireWebKitImage(t)
	conf := shippedDockerConfig(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "2", "-conf", conf) // the later -conf wins
	page := [3]int{0, 160, 255}
	shot := filepath.Join(t.TempDir(), "webkit.png")
	client := startWaitingClient(t, "testdata/webkit_docker.py", d.url+"/wd/hub", shot,
		`{"screenResolution": "1280x1024x24", "enableVNC": true}`, fmt.Sprintf("%d,%d,%d", page[0], page[1], page[2]))
	var s webkitDockerSeen
	if err := json.Unmarshal(client.out.Bytes(), &s); err != nil {
		t.Fatalf("client's line %q: %v", client.out.Text(), err)
	}
	browser := containers(t, d.instance)
	if len(browser) != 1 {
		t.Fatalf("want one browser container, got %v", browser)
	}
	if img, _ := exec.Command("docker", "inspect", "-f", "{{.Config.Image}}", browser[0]).Output(); strings.TrimSpace(string(img)) != webkitTag {
		t.Fatalf("the session runs in %q, want the WebKit image %s", img, webkitTag)
	}

	t.Run("WebDriver", func(t *testing.T) {
		if s.Maximized != [2]int{1280, 1024} {
			t.Errorf("maximized window %v, want the screen's 1280x1024", s.Maximized)
		}
		if s.Value != "typed into WebKit" {
			t.Errorf("the input holds %q, want what was typed", s.Value)
		}
		if !strings.Contains(s.UserAgent, "AppleWebKit") || strings.Contains(s.UserAgent, "Chrome") {
			t.Errorf("navigator.userAgent %q is not WebKit's", s.UserAgent)
		}
		if s.Caps["browserName"] != "MiniBrowser" || !strings.HasPrefix(fmt.Sprint(s.Caps["browserVersion"]), "2.50") {
			t.Errorf("the session's browser: %v %v, want MiniBrowser 2.50", s.Caps["browserName"], s.Caps["browserVersion"])
		}
		got, w, h := pngColourAt(t, shot, 640, 600) // below the input, at the top left
		if w != 1280 || !near(got, page) {
			kept := filepath.Join(os.TempDir(), "webkit-docker-"+runID+".png")
			if data, err := os.ReadFile(shot); err == nil && os.WriteFile(kept, data, 0o644) == nil {
				t.Logf("the screenshot: %s", kept)
			}
			t.Errorf("the screenshot is %dx%d with rgb%v at (640,600); the page is 1280 wide and rgb%v", w, h, got, page)
		}
		if s.Window != [2]int{1280, 1024} {
			t.Errorf("window %v, want the screen's [1280 1024]", s.Window)
		}
		if s.Upload == "" || s.Upload != s.UploadWant {
			t.Errorf("the file input holds %q, want %q (the client's file, uploaded into the container)", s.Upload, s.UploadWant)
		}
	})

	t.Run("NoDevTools", func(t *testing.T) {
		if cdp, ok := s.Caps["se:cdp"]; ok {
			t.Errorf("se:cdp %v offered for WebKit, which has no DevTools endpoint", cdp)
		}
		resp, err := http.Get(d.url + "/devtools/" + s.Session + "/json/version")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Value struct{ Error, Message string }
		}
		if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode < 400 || e.Value.Error != "unsupported operation" || e.Value.Message == "" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("/devtools/%s/json/version: %d %q %s, want a W3C unsupported operation", s.Session, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	})

	t.Run("VNC", func(t *testing.T) {
		if st := statusSessionOf(t, d.hub, s.Session); st["vnc"] != true || st["screen"] != "1280x1024x24" {
			t.Fatalf("/status entry: vnc %v screen %v", st["vnc"], st["screen"])
		}
		wsURL := "ws" + strings.TrimPrefix(d.url, "http") + "/vnc/" + s.Session
		if _, err := dialRFB(wsURL, "wrong"); err == nil {
			t.Fatal("a wrong VNC password was accepted")
		}
		vnc, err := dialRFB(wsURL, "selenoid")
		if err != nil {
			t.Fatal("RFB through the hub:", err)
		}
		defer vnc.Close()
		if vnc.width != 1280 || vnc.height != 1024 {
			t.Fatalf("the VNC framebuffer is %dx%d, want the session's 1280x1024", vnc.width, vnc.height)
		}
		// Inside MiniBrowser's default window too (1024x768 at the top
		// left), so that this reads the page whether or not the hub sized it.
		if got := vncColourAt(t, vnc, 300, 400, page); !near(got, page) {
			t.Fatalf("the screen at (300,400) is rgb%v over VNC, the page is rgb%v", got, page)
		}
		other := [3]int{255, 96, 0}
		paint(t, d.url, s.Session, other)
		if got := vncColourAt(t, vnc, 300, 400, other); !near(got, other) {
			t.Fatalf("after a repaint the screen at (300,400) is rgb%v over VNC, the page is rgb%v", got, other)
		}
	})

	t.Run("Downloads", func(t *testing.T) {
		servePageIn(t, browser[0], 8090)
		if r := call(t, "POST", d.url+"/wd/hub/session/"+s.Session+"/url", `{"url":"http://127.0.0.1:8090/report.txt"}`); r.status != 200 {
			t.Fatalf("navigate to the download: %d %s", r.status, r.Value.Message)
		}
		// WebKit saves it in $HOME/Downloads, which the image's file server
		// serves; whole once its content is.
		const want = "websummoner download test file\n"
		var got string
		var names []string
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && got != want; time.Sleep(100 * time.Millisecond) {
			names = nil
			if err := json.Unmarshal(rawCall(t, "GET", d.url+"/download/"+s.Session+"/?json", ""), &names); err != nil {
				t.Fatalf("/download/%s/?json: %v", s.Session, err)
			}
			if slices.Contains(names, "report.txt") {
				got = string(rawCall(t, "GET", d.url+"/download/"+s.Session+"/report.txt", ""))
			}
		}
		if got != want {
			t.Fatalf("/download/%s/ lists %v; report.txt holds %q, want %q", s.Session, names, got, want)
		}
	})

	t.Run("BesideChromium", func(t *testing.T) {
		chrome := chromeSession(t, d.url, ``)
		defer call(t, "DELETE", d.url+"/wd/hub/session/"+chrome, "")
		if n := len(containers(t, d.instance)); n != 2 {
			t.Fatalf("%d containers, want WebKit's and Chromium's", n)
		}
		for i := range 3 { // interleaved: each session answers its own commands
			w, c := fmt.Sprintf("webkit-%d", i), fmt.Sprintf("chromium-%d", i)
			if got := titleRoundTrip(t, d.url, s.Session, w); got != w {
				t.Fatalf("the WebKit session's title is %q, want %q", got, w)
			}
			if got := titleRoundTrip(t, d.url, chrome, c); got != c {
				t.Fatalf("the Chromium session's title is %q, want %q", got, c)
			}
		}
		wa, ca := fmt.Sprint(execute(t, d.url, s.Session, "return navigator.userAgent")), fmt.Sprint(execute(t, d.url, chrome, "return navigator.userAgent"))
		if strings.Contains(wa, "Chrome") || !strings.Contains(ca, "Chrome") {
			t.Fatalf("user agents: WebKit session %q, Chromium session %q", wa, ca)
		}
	})

	if last := client.finish(t); !strings.Contains(last, s.Session) {
		t.Fatalf("the client's last line %q, want its quit", last)
	}
	d.settled(t)

	t.Run("Ruby", func(t *testing.T) {
		// Debian's ruby-selenium-webdriver, by the "webkit" alias.
		requireTool(t, "ruby")
		ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ruby", "testdata/webkit.rb", d.url+"/wd/hub").CombinedOutput()
		if err != nil {
			t.Fatalf("ruby client: %v %s", err, out)
		}
		f := strings.Split(strings.TrimSpace(string(out)), "|")
		if len(f) != 4 || f[1] != "from ruby" || f[2] != "typed by ruby" || !strings.Contains(f[3], "AppleWebKit") || strings.Contains(f[3], "Chrome") {
			t.Fatalf("ruby client saw %q", out)
		}
	})
	d.settled(t)

	t.Run("Aliases", func(t *testing.T) {
		for _, name := range []string{"webkit", "webkitgtk"} {
			r := call(t, "POST", d.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"`+name+`"}}}`)
			if r.status != 200 || r.Value.SessionID == "" {
				t.Fatalf("%s: %d %s %s", name, r.status, r.Value.Error, r.Value.Message)
			}
			agent := fmt.Sprint(execute(t, d.url, r.Value.SessionID, "return navigator.userAgent"))
			call(t, "DELETE", d.url+"/wd/hub/session/"+r.Value.SessionID, "")
			if !strings.Contains(agent, "AppleWebKit") || strings.Contains(agent, "Chrome") {
				t.Fatalf("%s: navigator.userAgent %q is not WebKit's", name, agent)
			}
		}
	})

	t.Run("Video", func(t *testing.T) {
		// From Go, naming no binary: the entry's caps supply MiniBrowser.
		r := call(t, "POST", d.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"MiniBrowser","selenoid:options":{"enableVideo":true,"screenResolution":"1280x1024x24"}}}}`)
		if r.status != 200 || r.Value.SessionID == "" {
			t.Fatalf("recorded WebKit session: %d %s %s", r.status, r.Value.Error, r.Value.Message)
		}
		id := r.Value.SessionID
		if n := len(recorders(t, d.instance)); n != 1 {
			t.Fatalf("%d recorders for a recorded session, want 1", n)
		}
		colour := [3]int{0, 200, 0}
		paint(t, d.url, id, colour)
		time.Sleep(2 * time.Second) // the scenario: the page on screen for 2 s
		call(t, "DELETE", d.url+"/wd/hub/session/"+id, "")
		d.await(t, "[VIDEO_SAVED]")
		file := filepath.Join(d.videos, id+".mp4")
		p, dur := ffprobe(t, file)
		if dur <= 0 || p.Streams[0].Width != 1280 || p.Streams[0].Height != 1024 {
			t.Errorf("video %+v lasting %.2fs, want 1280x1024", p.Streams[0], dur)
		}
		if seen := coloursShown(t, file, 300, 400); !showsInOrder(seen, [][3]int{colour}) {
			t.Errorf("the video shows %v at (300,400), never the page's rgb%v", seen, colour)
		}
	})
	d.assertClean(t)
}
