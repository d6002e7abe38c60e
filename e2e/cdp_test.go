package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/websocket"
)

// newChrome creates a session through the hub with extra capabilities and
// returns its id and the capabilities the client got.
func newChrome(t *testing.T, hubURL, extra string) (string, map[string]any) {
	t.Helper()
	resp := call(t, "POST", hubURL+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"`+extra+`}}}`)
	if resp.status != 200 {
		t.Fatalf("create: %+v", resp)
	}
	return resp.Value.SessionID, resp.caps
}

// cdpTab is a new tab of the browser behind se:cdp, driven by chromedp over
// the hub; the cancel closes it (and the connection) within a minute at most.
func cdpTab(t *testing.T, cdp string) (context.Context, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	alloc, cancelAlloc := chromedp.NewRemoteAllocator(ctx, cdp, chromedp.NoModifyURL)
	// chromedp v0.11 does not know every event of this Chromium; its complaints
	// about them are not the test's business.
	tab, cancelTab := chromedp.NewContext(alloc, chromedp.WithErrorf(func(string, ...any) {}))
	return tab, func() { cancelTab(); cancelAlloc(); cancel() }
}

// CDP through the hub with a real CDP client: chromedp connects to se:cdp,
// navigates, evaluates and takes a screenshot; a raw WebSocket client talks to
// /devtools/{id}/page; the socket closes when the session ends.
func TestCDPThroughHub(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "1")
	id, caps := newChrome(t, h.url, "")
	cdp, _ := caps["se:cdp"].(string)
	hubURL, _ := url.Parse(h.url)
	if cdp != "ws://"+hubURL.Host+"/devtools/"+id+"/" || caps["se:cdpVersion"] == "" {
		t.Fatalf("se:cdp %q, se:cdpVersion %v", cdp, caps["se:cdpVersion"])
	}
	// A raw WebSocket client on /page: the session's own first tab.
	ws, err := websocket.Dial("ws://"+hubURL.Host+"/devtools/"+id+"/page", "", "http://localhost/")
	if err != nil {
		t.Fatalf("dial /page: %v", err)
	}
	defer ws.Close()
	if err := websocket.JSON.Send(ws, map[string]any{"id": 1, "method": "Runtime.evaluate", "params": map[string]any{"expression": "6*7"}}); err != nil {
		t.Fatal(err)
	}
	var answer struct {
		ID     int
		Result struct{ Result struct{ Value float64 } }
	}
	ws.SetDeadline(time.Now().Add(2 * time.Minute))
	for answer.ID != 1 {
		if err := websocket.JSON.Receive(ws, &answer); err != nil {
			t.Fatalf("read /page: %v", err)
		}
	}
	if answer.Result.Result.Value != 42 {
		t.Fatalf("6*7 over /page = %v", answer.Result.Result.Value)
	}
	page := pageServer(t)
	tab, cancelTab := cdpTab(t, cdp)
	defer cancelTab()
	var title string
	var sum float64
	var shot []byte
	if err := chromedp.Run(tab, chromedp.Navigate(page.URL), chromedp.Title(&title),
		chromedp.Evaluate(`20 + 22`, &sum), chromedp.CaptureScreenshot(&shot)); err != nil {
		t.Fatalf("chromedp through the hub: %v", err)
	}
	if title != "WebSummoner e2e" || sum != 42 {
		t.Fatalf("title %q, 20+22 = %v", title, sum)
	}
	if _, err := png.Decode(bytes.NewReader(shot)); err != nil {
		t.Fatalf("the CDP screenshot is not a PNG: %v", err)
	}
	cancelTab()

	var list []map[string]any
	if err := json.Unmarshal(rawCall(t, "GET", h.url+"/devtools/"+id+"/json/list", ""), &list); err != nil || len(list) == 0 {
		t.Fatalf("/json/list: %v %v", list, err)
	}
	if ws, _ := list[0]["webSocketDebuggerUrl"].(string); !strings.HasPrefix(ws, "ws://"+hubURL.Host+"/devtools/"+id+"/page/") {
		t.Fatalf("/json/list points past the hub: %q", ws)
	}
	// DELETE closes the open socket.
	call(t, "DELETE", h.url+"/wd/hub/session/"+id, "")
	var v any
	if err := websocket.JSON.Receive(ws, &v); err == nil {
		// an event in flight may still arrive; the next read must fail
		if err := websocket.JSON.Receive(ws, &v); err == nil {
			t.Fatal("the CDP socket stayed open after DELETE")
		}
	}
	h.stop(t)
}

// WebDriver BiDi through the hub: webSocketUrl points at the hub; a
// subscription to log.entryAdded sees the page's console.log.
func TestBiDiThroughHub(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "1")
	id, caps := newChrome(t, h.url, `,"webSocketUrl":true`)
	hubURL, _ := url.Parse(h.url)
	bidi, _ := caps["webSocketUrl"].(string)
	if bidi != "ws://"+hubURL.Host+"/session/"+id+"/se/bidi" {
		t.Fatalf("webSocketUrl %q", bidi)
	}
	ws, err := websocket.Dial(bidi, "", "http://localhost/")
	if err != nil {
		t.Fatalf("dial BiDi: %v", err)
	}
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(2 * time.Minute))
	websocket.JSON.Send(ws, map[string]any{"id": 1, "method": "session.subscribe", "params": map[string]any{"events": []string{"log.entryAdded"}}})
	var msg map[string]any
	for msg["id"] != 1.0 {
		msg = nil
		if err := websocket.JSON.Receive(ws, &msg); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
	}
	rawCall(t, "POST", h.url+"/wd/hub/session/"+id+"/execute/sync", `{"script":"console.log('hello from the page through the hub')","args":[]}`)
	for {
		msg = nil
		if err := websocket.JSON.Receive(ws, &msg); err != nil {
			t.Fatalf("no log.entryAdded: %v", err)
		}
		if msg["method"] == "log.entryAdded" {
			params, _ := json.Marshal(msg["params"])
			if !strings.Contains(string(params), "hello from the page through the hub") {
				t.Fatalf("log entry %s", params)
			}
			break
		}
	}
	call(t, "DELETE", h.url+"/wd/hub/session/"+id, "")
	h.stop(t)
}

// CDP into the Chromium container, through Selenoid's port-7070 contract (the
// image's socat forwarder): chromedp on se:cdp navigates, evaluates and takes a
// screenshot.
func TestDockerCDPThroughHub(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1")
	r := call(t, "POST", d.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	if r.status != 200 {
		t.Fatalf("create: %+v", r)
	}
	cdp, _ := r.caps["se:cdp"].(string)
	if !strings.HasSuffix(cdp, "/devtools/"+r.Value.SessionID+"/") {
		t.Fatalf("se:cdp %q", cdp)
	}
	tab, cancelTab := cdpTab(t, cdp)
	defer cancelTab()
	var sum float64
	var shot []byte
	if err := chromedp.Run(tab, chromedp.Navigate("about:blank"), chromedp.Evaluate(`40 + 2`, &sum), chromedp.CaptureScreenshot(&shot)); err != nil {
		t.Fatalf("chromedp into the container: %v", err)
	}
	if _, err := png.Decode(bytes.NewReader(shot)); err != nil || sum != 42 {
		t.Fatalf("40+2 = %v; screenshot: %v", sum, err)
	}
	cancelTab()
	call(t, "DELETE", d.url+"/wd/hub/session/"+r.Value.SessionID, "")
	d.assertClean(t)
}

// WebDriver BiDi into the Chromium container.
func TestDockerBiDiThroughHub(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1")
	r := call(t, "POST", d.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","webSocketUrl":true}}}`)
	if r.status != 200 {
		t.Fatalf("create: %+v", r)
	}
	bidi, _ := r.caps["webSocketUrl"].(string)
	ws, err := websocket.Dial(bidi, "", "http://localhost/")
	if err != nil {
		t.Fatalf("dial %q: %v", bidi, err)
	}
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(2 * time.Minute))
	websocket.JSON.Send(ws, map[string]any{"id": 1, "method": "session.status", "params": map[string]any{}})
	var msg map[string]any
	for msg["id"] != 1.0 {
		msg = nil
		if err := websocket.JSON.Receive(ws, &msg); err != nil {
			t.Fatalf("session.status over BiDi: %v", err)
		}
	}
	if msg["type"] != "success" {
		t.Fatalf("session.status: %v", msg)
	}
	call(t, "DELETE", d.url+"/wd/hub/session/"+r.Value.SessionID, "")
	d.assertClean(t)
}
