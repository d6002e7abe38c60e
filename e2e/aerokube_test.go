package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"golang.org/x/net/websocket"
)

// aerokubeClient is a Selenoid user's Python Selenium client: enableVNC in
// selenoid:options, a page, an element, a click on a download link. It prints
// what it saw as one JSON line, then holds the session until a line on stdin.
const aerokubeClient = `
import json, sys
from selenium import webdriver
from selenium.webdriver.common.by import By
opts = webdriver.ChromeOptions()
opts.set_capability("selenoid:options", {"enableVNC": True, "screenResolution": "1280x1024x24"})
d = webdriver.Remote(command_executor=sys.argv[1], options=opts)
try:
    d.get(sys.argv[2])
    text = d.find_element(By.ID, "marker").text
    d.find_element(By.ID, "download").click()
    print(json.dumps({"session": d.session_id, "text": text, "cdp": d.capabilities.get("se:cdp", "")}), flush=True)
    sys.stdin.readline()
finally:
    d.quit()
`

// requireAerokube builds the hub and aerokube's Chromium test image
// (images/aerokube/build.sh, cached by tag) and returns the hub binary and the
// image's tag; it skips without Docker or Python Selenium, and fails in CI.
func requireAerokube(t *testing.T) (bin, tag string) {
	t.Helper()
	var missing []string
	if err := exec.Command("docker", "info").Run(); err != nil {
		missing = append(missing, "a Docker engine")
	}
	if err := exec.Command(python, "-c", "import selenium").Run(); err != nil {
		missing = append(missing, "python3-selenium")
	}
	if len(missing) > 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("missing", missing)
		}
		t.Skip("missing", missing)
	}
	bin = filepath.Join(t.TempDir(), "websummoner")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/websummoner").CombinedOutput(); err != nil {
		t.Fatalf("build hub: %v\n%s", err, out)
	}
	// Minutes the first time (debootstrap and Debian's Chromium), then found by tag.
	tag, err := lastLine("../images/aerokube/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	return bin, tag
}

// randomHex is n random bytes in hex: values a broken path cannot produce.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// evaluateOn runs one Runtime.evaluate on a page's DevTools socket and returns
// its string value ("" when there is none).
func evaluateOn(t *testing.T, socket, expression string) string {
	t.Helper()
	ws, err := websocket.Dial(socket, "", "http://localhost/")
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(time.Minute))
	if err := websocket.JSON.Send(ws, map[string]any{"id": 1, "method": "Runtime.evaluate", "params": map[string]any{"expression": expression}}); err != nil {
		t.Fatal(err)
	}
	for {
		var msg struct {
			ID     int
			Result struct{ Result struct{ Value any } }
		}
		if err := websocket.JSON.Receive(ws, &msg); err != nil {
			t.Fatalf("%s: %v", socket, err)
		}
		if msg.ID == 1 { // events the page sends meanwhile have no id
			v, _ := msg.Result.Result.Value.(string)
			return v
		}
	}
}

// A Selenoid user's browsers.json entry for aerokube's selenoid/chrome, on an
// image built from aerokube's own sources (images/aerokube), through the hub
// with real clients: Python Selenium (WebDriver, a download), a Go RFB client
// on /vnc/{id}, chromedp on se:cdp, plain HTTP on /download/{id}/ and
// /clipboard/{id}. Each is the image's own service (chromedriver on 4444,
// x11vnc on 5900, aerokube's devtools on 7070, fileserver on 8080, xseld on
// 9090), reached only through the hub.
func TestAerokubeChromeThroughHub(t *testing.T) {
	bin, tag := requireAerokube(t)
	instance := instanceFor(t)
	conf := filepath.Join(t.TempDir(), "browsers.json")
	// As a Selenoid user writes it for selenoid/chrome: image, port, path.
	doc := fmt.Sprintf(`{"chrome": {"default": "stable", "versions": {"stable": {"image": %q, "port": "4444", "path": "/"}}}}`, tag)
	if err := os.WriteFile(conf, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	removeInstance(t, instance) // runs after the hub is stopped or killed
	d := &dockerHub{hub: runHub(t, bin, []string{"-conf", conf, "-listen", addr, "-instance", instance, "-limit", "1"}, addr), instance: instance}

	marker, payload := randomHex(8), randomHex(4096)
	page := "data:text/html;base64," + base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf(
		`<html><head><title>aerokube</title></head><body style="margin:0;background:rgb(0,160,255)">`+
			`<p id="marker">%s</p><a id="download" download="payload.txt" href="data:text/plain;base64,%s">download</a></body></html>`,
		marker, base64.StdEncoding.EncodeToString([]byte(payload)))))

	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout) // a hang fails
	defer cancel()
	py := exec.CommandContext(ctx, python, "-c", aerokubeClient, d.url+"/wd/hub", page)
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
	var line string
	select {
	case line = <-out.line:
	case <-ctx.Done():
	}
	var seen struct{ Session, Text, CDP string }
	if err := json.Unmarshal([]byte(line), &seen); err != nil || seen.Session == "" {
		wait()
		t.Fatalf("the Python client made no session (%q); stderr %s", line, errOut.String())
	}
	id := seen.Session

	t.Run("WebDriver", func(t *testing.T) {
		if seen.Text != marker {
			t.Errorf("Python Selenium found the element's text %q, want the page's %q", seen.Text, marker)
		}
		if s := statusSessionOf(t, d.hub, id); s["vnc"] != true || s["screen"] != "1280x1024x24" {
			t.Errorf("/status entry: vnc %v screen %v, want true and the client's screenResolution", s["vnc"], s["screen"])
		}
	})

	t.Run("VNC", func(t *testing.T) {
		wsURL := "ws" + strings.TrimPrefix(d.url, "http") + "/vnc/" + id
		if _, err := dialRFB(wsURL, "wrong"); err == nil {
			t.Fatal("a wrong VNC password was accepted")
		}
		vnc, err := dialRFB(wsURL, "selenoid")
		if err != nil {
			t.Fatal("RFB through the hub with aerokube's password:", err)
		}
		defer vnc.Close()
		if vnc.width != 1280 || vnc.height != 1024 {
			t.Fatalf("the VNC framebuffer is %dx%d, want the session's 1280x1024", vnc.width, vnc.height)
		}
		// The page's colour fills most of the screen once x11vnc, which polls
		// the screen, has seen it; a busy machine's moments are long.
		var share float64
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			px, err := vnc.frame()
			if err != nil {
				t.Fatal("framebuffer update:", err)
			}
			n := 0
			for _, p := range px {
				if near([3]int{int(p >> 16 & 255), int(p >> 8 & 255), int(p & 255)}, [3]int{0, 160, 255}) {
					n++
				}
			}
			if share = float64(n) / float64(len(px)); share > 0.5 {
				return
			}
		}
		t.Fatalf("the page's colour covers %.0f%% of the VNC framebuffer, want most of it", share*100)
	})

	t.Run("CDP", func(t *testing.T) {
		hubURL, _ := url.Parse(d.url)
		if want := "ws://" + hubURL.Host + "/devtools/" + id + "/"; seen.CDP != want {
			t.Fatalf("se:cdp %q, want %q", seen.CDP, want)
		}
		proto := rawCall(t, "GET", d.url+"/devtools/"+id+"/json/protocol", "")
		var p struct {
			Domains []struct{ Domain string } `json:"domains"`
		}
		if err := json.Unmarshal(proto, &p); err != nil || len(p.Domains) < 10 {
			t.Errorf("/devtools/%s/json/protocol: %d domains, %v: %.200s", id, len(p.Domains), err, proto)
		}
		// Selenoid's first-page socket, raw, while the client's page is the
		// only one (chromedp opens a tab of its own below).
		if got := evaluateOn(t, "ws://"+hubURL.Host+"/devtools/"+id+"/page", `document.getElementById("marker").textContent`); got != marker {
			t.Errorf("/devtools/%s/page evaluates the marker as %q, want %q", id, got, marker)
		}
		tab, cancelTab := cdpTab(t, seen.CDP)
		defer cancelTab()
		if err := chromedp.Run(tab); err != nil {
			t.Fatalf("chromedp on se:cdp: %v", err)
		}
		// The Python client's own page, in the same browser: its marker.
		targets, err := chromedp.Targets(tab)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(targets, func(ti *target.Info) bool { return ti.Type == "page" && strings.HasPrefix(ti.URL, "data:text/html") })
		if i < 0 {
			t.Fatalf("no page target with the client's page among %d targets", len(targets))
		}
		pageCtx, cancelPage := chromedp.NewContext(tab, chromedp.WithTargetID(targets[i].TargetID))
		defer cancelPage()
		var text string
		if err := chromedp.Run(pageCtx, chromedp.Evaluate(`document.getElementById("marker").textContent`, &text)); err != nil {
			t.Fatalf("evaluate in the client's page: %v", err)
		}
		if text != marker {
			t.Fatalf("the page's marker over CDP is %q, want %q", text, marker)
		}
		// Selenoid's page socket by target id, raw.
		path := "page/" + string(targets[i].TargetID)
		if got := evaluateOn(t, "ws://"+hubURL.Host+"/devtools/"+id+"/"+path, `document.getElementById("marker").textContent`); got != marker {
			t.Errorf("/devtools/%s/%s evaluates the marker as %q, want %q", id, path, got, marker)
		}
	})

	t.Run("Downloads", func(t *testing.T) {
		// Chromium renames the file into place once it is whole; the file
		// server lists it from then on.
		listed := false
		var list []byte
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !listed; time.Sleep(100 * time.Millisecond) {
			list = rawCall(t, "GET", d.url+"/download/"+id+"/?json", "")
			var names []string
			if err := json.Unmarshal(list, &names); err != nil {
				t.Fatalf("/download/%s/?json is not the file server's list: %.300s", id, list)
			}
			listed = slices.Contains(names, "payload.txt")
		}
		if !listed {
			t.Fatalf("/download/%s/?json never listed payload.txt: %.300s", id, list)
		}
		resp, err := http.Get(d.url + "/download/" + id + "/payload.txt")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != payload {
			t.Fatalf("/download/%s/payload.txt: %d, %d bytes, want the page's %d bytes", id, resp.StatusCode, len(got), len(payload))
		}
	})

	t.Run("Clipboard", func(t *testing.T) {
		text := "clip-" + randomHex(8)
		resp, err := http.Post(d.url+"/clipboard/"+id, "text/plain", strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST /clipboard/%s: %d %s", id, resp.StatusCode, body)
		}
		// aerokube's xseld copies xsel's output to the answer on a goroutine
		// that races the handler's return, so a GET may answer 200 with an
		// empty body (under Selenoid too): the text must come back within a
		// few reads, and nothing else ever may.
		var status int
		got := waitFor(30*time.Second, func() bool {
			resp, err := http.Get(d.url + "/clipboard/" + id)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
			if status != 200 || len(body) > 0 && !bytes.Equal(body, []byte(text)) {
				t.Fatalf("GET /clipboard/%s: %d %q, want %q", id, status, body, text)
			}
			return bytes.Equal(body, []byte(text))
		})
		if !got {
			t.Fatalf("GET /clipboard/%s: %d %q for 30s, want %q", id, status, body, text)
		}
	})

	stdin.Write([]byte("done\n"))
	if err := wait(); err != nil {
		t.Fatalf("the Python client: %v\n%s", err, errOut.String())
	}
	d.assertClean(t)
}
