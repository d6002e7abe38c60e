package hub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
)

// fakeDevTools stands in for a browser's DevTools endpoint (a real one needs a
// browser; e2e/cdp_test.go has that): /json/version, /json/list and echoing
// sockets.
func fakeDevTools(t *testing.T) *httptest.Server {
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/json/version", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"Browser":"Chrome/128.0","webSocketDebuggerUrl":"ws://%s/devtools/browser/b-1"}`, strings.TrimPrefix(srv.URL, "http://"))
	})
	mux.HandleFunc("/json/list", func(w http.ResponseWriter, r *http.Request) {
		host := strings.TrimPrefix(srv.URL, "http://")
		fmt.Fprintf(w, `[{"id":"p-1","type":"page","devtoolsFrontendUrl":"https://chrome-devtools-frontend.appspot.com/serve_rev/@abc/inspector.html?ws=%s/devtools/page/p-1","webSocketDebuggerUrl":"ws://%s/devtools/page/p-1"}]`, host, host)
	})
	mux.HandleFunc("/json/protocol", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, devToolsProtocol)
	})
	echo := websocket.Handler(func(c *websocket.Conn) {
		fmt.Fprintf(c, "%s", c.Request().URL.Path) // says which socket it is
		io.Copy(c, c)
	})
	mux.Handle("/devtools/", websocket.Server{Handler: echo, Handshake: func(*websocket.Config, *http.Request) error { return nil }})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// devToolsProtocol is the start of what a browser's /json/protocol holds,
// and more than fits in a small buffer.
var devToolsProtocol = `{"version":{"major":"1","minor":"3"},"domains":[` + strings.Repeat(`{"domain":"Page","commands":[]},`, 50000) + `{"domain":"Last"}]}`

func TestDevToolsThroughHub(t *testing.T) {
	dt := fakeDevTools(t)
	dtURL, _ := url.Parse(dt.URL)
	l := &stubLauncher{sides: func(e *launcher.Endpoints) { e.DevTools = dtURL }}
	f := newFixture(t, queue.Options{Limit: 2}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	v := body["value"].(map[string]any)
	id, caps := v["sessionId"].(string), v["capabilities"].(map[string]any)
	host := strings.TrimPrefix(f.srv.URL, "http://")
	if caps["se:cdp"] != "ws://"+host+"/devtools/"+id+"/" {
		t.Fatalf("se:cdp %v", caps["se:cdp"])
	}
	// Behind a reverse proxy that says where the client reached it, the
	// socket's URL is the proxy's.
	_, body = f.do("POST", "/session", w3cChrome, "X-Forwarded-Host", "grid.example:443, inner:80", "X-Forwarded-Proto", "https")
	v2 := body["value"].(map[string]any)
	if got, want := v2["capabilities"].(map[string]any)["se:cdp"], "wss://grid.example:443/devtools/"+v2["sessionId"].(string)+"/"; got != want {
		t.Fatalf("se:cdp behind a proxy: %v, want %s", got, want)
	}
	f.do("DELETE", "/session/"+v2["sessionId"].(string), "")
	// nginx's $host carries no port; X-Forwarded-Port gives it.
	_, body = f.do("POST", "/session", w3cChrome, "X-Forwarded-Host", "grid.example", "X-Forwarded-Port", "8443", "X-Forwarded-Proto", "https")
	v3 := body["value"].(map[string]any)
	if got, want := v3["capabilities"].(map[string]any)["se:cdp"], "wss://grid.example:8443/devtools/"+v3["sessionId"].(string)+"/"; got != want {
		t.Fatalf("se:cdp behind a proxy that gives the port apart: %v, want %s", got, want)
	}
	f.do("DELETE", "/session/"+v3["sessionId"].(string), "")
	for path, want := range map[string]string{"/": "/devtools/browser/b-1", "/browser": "/devtools/browser/b-1", "/page": "/devtools/page/p-1", "/page/p-7": "/devtools/page/p-7", "/page/p-7/": "/devtools/page/p-7", "/page/p%2D8": "/devtools/page/p-8"} {
		ws, err := websocket.Dial("ws://"+host+"/devtools/"+id+path, "", "http://elsewhere.example/")
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		buf := make([]byte, 100)
		ws.SetDeadline(time.Now().Add(5 * time.Second))
		n, _ := ws.Read(buf)
		if string(buf[:n]) != want {
			t.Errorf("%s reached %q, want %q", path, buf[:n], want)
		}
		ws.Close()
	}
	// /json/protocol is passed on as the browser sent it, however long.
	resp, err := http.Get(f.srv.URL + "/devtools/" + id + "/json/protocol")
	if err != nil {
		t.Fatal(err)
	}
	proto, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(proto) != devToolsProtocol || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("/json/protocol: %d %q, %d bytes; want the browser's %d", resp.StatusCode, resp.Header.Get("Content-Type"), len(proto), len(devToolsProtocol))
	}
	// With the slash Playwright's connectOverCDP adds, too.
	for _, p := range []string{"/json/version", "/json/version/"} {
		_, list := f.do("GET", "/devtools/"+id+p, "")
		if list["webSocketDebuggerUrl"] != "ws://"+host+"/devtools/"+id+"/browser" {
			t.Fatalf("%s points past the hub: %v", p, list)
		}
	}
	// Every URL of /json/list points at the hub, the DevTools frontend's
	// too: none names the browser's own port.
	resp, err = http.Get(f.srv.URL + "/devtools/" + id + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	var targets []map[string]string
	json.NewDecoder(resp.Body).Decode(&targets)
	resp.Body.Close()
	if len(targets) != 1 || targets[0]["webSocketDebuggerUrl"] != "ws://"+host+"/devtools/"+id+"/page/p-1" ||
		!strings.HasSuffix(targets[0]["devtoolsFrontendUrl"], "?ws="+host+"/devtools/"+id+"/page/p-1") {
		t.Fatalf("/json/list points past the hub: %v", targets)
	}
	// A target id is one segment: none that JoinPath would clean into
	// another DevTools path.
	for _, p := range []string{"/page/..%2F..%2Fjson%2Fversion", "/page/..", "/page/%2e%2e", "/page/a%2Fb", "/page/a%3Fb", "/page/..%252Fbrowser%252Fx", "/page/%252e%252e"} {
		if resp, body := f.do("GET", "/devtools/"+id+p, ""); resp.StatusCode != 404 {
			t.Errorf("%s: %d %v, want 404", p, resp.StatusCode, body)
		}
	}
	// The socket closes when the session ends.
	ws, err := websocket.Dial("ws://"+host+"/devtools/"+id+"/page", "", "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	f.do("DELETE", "/session/"+id, "")
	ws.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	ws.Read(buf) // the greeting
	if _, err := ws.Read(buf); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the socket outlived its session: %v", err)
	}
	// Nothing of the proxy is left running once its session has ended.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "proxySocket") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a side channel's goroutine outlived its session:\n%s", stacks)
		}
	}
	// Errors: unknown session, no DevTools, no BiDi.
	resp, body = f.do("GET", "/devtools/nope/json/version", "")
	if code, _ := errOf(body); resp.StatusCode != 404 || code != "invalid session id" {
		t.Fatalf("unknown session: %d %v", resp.StatusCode, body)
	}
	l.sides = nil
	_, body = f.do("POST", "/session", w3cChrome)
	id = body["value"].(map[string]any)["sessionId"].(string)
	if _, ok := body["value"].(map[string]any)["capabilities"].(map[string]any)["se:cdp"]; ok {
		t.Fatal("se:cdp for a session without DevTools")
	}
	resp, body = f.do("GET", "/devtools/"+id+"/browser", "")
	if code, msg := errOf(body); resp.StatusCode != 500 || code != "unsupported operation" || !strings.Contains(msg, "port 7070") {
		t.Fatalf("no DevTools: %d %q %q", resp.StatusCode, code, msg)
	}
	resp, body = f.do("GET", "/session/"+id+"/se/bidi", "")
	if code, msg := errOf(body); resp.StatusCode != 500 || code != "unsupported operation" || !strings.Contains(msg, "webSocketUrl") {
		t.Fatalf("no BiDi: %d %q %q", resp.StatusCode, code, msg)
	}
	f.do("DELETE", "/session/"+id, "")
}

// aerokube's devtools program (their images' port 7070) answers /json/version
// and /json/list with an empty 200: the client is told to use the sockets,
// and the session is not taken for down.
func TestAerokubeDevToolsHasNoJSON(t *testing.T) {
	dt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(dt.Close)
	dtURL, _ := url.Parse(dt.URL)
	l := &stubLauncher{sides: func(e *launcher.Endpoints) { e.DevTools = dtURL }}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	for _, p := range []string{"json/version", "json/list"} {
		resp, body := f.do("GET", "/devtools/"+id+"/"+p, "")
		if code, msg := errOf(body); resp.StatusCode != 500 || code != "unsupported operation" || !strings.Contains(msg, "/devtools/"+id+"/browser") {
			t.Errorf("%s: %d %q %q", p, resp.StatusCode, code, msg)
		}
	}
	if f.sess.Len() != 1 {
		t.Fatal("the session ended")
	}
}
