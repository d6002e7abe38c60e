package hub

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// DELETE /session/{id}/ ends the session in the hub too, not only in the driver.
func TestDeleteWithTrailingSlash(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	if resp, _ := f.do("DELETE", "/wd/hub/session/"+id+"/", ""); resp.StatusCode != 200 {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	f.ev.Wait(t, "[SESSION_DELETED]", time.Minute) // the teardown runs after the answer
	if f.sess.Len() != 0 || f.q.Stats().InUse != 0 {
		t.Fatal("the session outlived DELETE …/")
	}
}

// A driver id with "/", a space and non-ASCII is addressed by its escaped form.
func TestEscapedSessionID(t *testing.T) {
	const id = "a/b cü"
	l := &stubLauncher{wrap: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch {
			case r.Method == "POST" && r.URL.Path == "/session":
				fmt.Fprintf(w, `{"value":{"sessionId":%q,"capabilities":{}}}`, id)
			case r.URL.EscapedPath() == "/session/a%2Fb%20c%C3%BC/url":
				fmt.Fprint(w, `{"value":"forwarded"}`)
			default:
				fmt.Fprint(w, `{"value":null}`)
			}
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	if got := body["value"].(map[string]any)["sessionId"]; got != id {
		t.Fatalf("id %v", got)
	}
	if resp, body := f.do("GET", "/session/a%2Fb%20c%C3%BC/url", ""); resp.StatusCode != 200 || body["value"] != "forwarded" {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
	if resp, _ := f.do("DELETE", "/session/a%2Fb%20c%C3%BC", ""); resp.StatusCode != 200 || f.sess.Len() != 0 {
		t.Fatalf("DELETE %d, sessions %d", resp.StatusCode, f.sess.Len())
	}
}

// Dot segments, escaped or not, are refused with a W3C body, never
// normalised and passed on, never an empty redirect.
func TestOddPathsAreRefused(t *testing.T) {
	l := &stubLauncher{bodies: make(chan []byte, 4)}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	<-l.bodies
	id := body["value"].(map[string]any)["sessionId"].(string)
	for _, c := range []struct{ method, path string }{
		{"GET", "/session/" + id + "/%2e%2e/%2e%2e/status"},
		{"GET", "/session/" + id + "/../../status"},
		{"POST", "/session/" + id + "/%2E/url"},
	} {
		req, _ := http.NewRequest(c.method, f.srv.URL+c.path, strings.NewReader("{}"))
		req.URL.Opaque = c.path // sent as written, not cleaned by the client
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || !strings.Contains(string(data), `"error":"unknown command"`) {
			t.Errorf("%s %s: %d %q", c.method, c.path, resp.StatusCode, data)
		}
	}
	if f.sess.Len() != 1 {
		t.Fatal("an odd path ended the session")
	}
}

// Paths as Selenoid takes them: Python's Selenium, given a grid URL that ends
// in a slash, sends /wd/hub//session and //session/{id}/…; a command with a
// trailing slash reaches the driver's command, not its 404.
func TestEmptySegmentsAndTrailingSlashes(t *testing.T) {
	seen := make(chan string, 8)
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != "POST" || r.URL.Path != "/session" {
				seen <- r.Method + " " + r.URL.EscapedPath()
			}
			h.ServeHTTP(w, r)
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	send := func(method, path, body string) (int, string) {
		t.Helper()
		// The request line as written: Go's client would send a path that
		// begins with "//" as an absolute URL.
		conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	code, data := send("POST", "/wd/hub//session", w3cChrome)
	if code != 200 {
		t.Fatalf("POST /wd/hub//session: %d %s", code, data)
	}
	var created struct{ Value struct{ SessionID string } }
	if err := json.Unmarshal([]byte(data), &created); err != nil || created.Value.SessionID == "" {
		t.Fatalf("%v %s", err, data)
	}
	id := created.Value.SessionID
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/wd/hub//session/" + id + "/title", "GET /session/" + id + "/title"},
		{"POST", "/session/" + id + "/url/", "POST /session/" + id + "/url"},
		{"GET", "//session/" + id + "//window//handles//", "GET /session/" + id + "/window/handles"},
	} {
		if code, data := send(c.method, c.path, "{}"); code != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, code, data)
		}
		if got := <-seen; got != c.want {
			t.Errorf("%s %s reached the driver as %s, want %s", c.method, c.path, got, c.want)
		}
	}
	if code, data := send("DELETE", "//wd/hub//session/"+id, ""); code != 200 {
		t.Fatalf("DELETE: %d %s", code, data)
	}
	f.ev.Wait(t, "[SESSION_DELETED]", time.Minute)
	if f.sess.Len() != 0 || f.q.Stats().InUse != 0 {
		t.Fatal("DELETE //wd/hub//session/{id} left the session")
	}
}

// A new-session body that breaks off (a short body, then the client half-closes)
// gets a W3C 400, not an empty 200.
func TestBodyThatBreaksOff(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"capabilities\":")
	conn.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(data), `"error":"invalid argument"`) {
		t.Fatalf("%d %q", resp.StatusCode, data)
	}
	if f.l.starts.Load() != 0 || f.q.Stats().InUse != 0 {
		t.Fatal("a broken body started a browser or took a slot")
	}
}

// Selenium 4's /se/file reaches the driver as /file (both prefixes); /file
// stays; an upload over -max-upload-size is 413, whether it says its length or not.
func TestFileUploadPaths(t *testing.T) {
	seen := make(chan string, 8)
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "file") {
				io.Copy(io.Discard, r.Body)
				seen <- r.Method + " " + r.URL.Path
			}
			h.ServeHTTP(w, r)
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{MaxUploadSize: 1 << 20}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	upload := uploadBody(zipOf(t, map[string][]byte{"a.txt": []byte("a")}))
	for _, p := range []string{"/wd/hub/session/" + id + "/se/file", "/session/" + id + "/se/file", "/session/" + id + "/file"} {
		if resp, _ := f.do("POST", p, upload); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
		if got := <-seen; got != "POST /session/"+id+"/file" {
			t.Errorf("%s reached the driver as %s", p, got)
		}
	}
	big := `{"file":"` + strings.Repeat("A", 2<<20) + `"}`
	resp, body := f.do("POST", "/session/"+id+"/se/file", big)
	if code, msg := errOf(body); resp.StatusCode != 413 || code != "invalid argument" || !strings.Contains(msg, "-max-upload-size 1 MiB") {
		t.Fatalf("declared length: %d %q %q", resp.StatusCode, code, msg)
	}
	req, _ := http.NewRequest("POST", f.srv.URL+"/session/"+id+"/se/file", io.MultiReader(strings.NewReader(big))) // no length: chunked
	req.ContentLength = -1
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 413 || !strings.Contains(string(data), "-max-upload-size") {
		t.Fatalf("chunked: %d %q", r.StatusCode, data)
	}
	if f.sess.Len() != 1 {
		t.Fatal("a refused upload ended the session")
	}
}

// A local session's downloads go to its own directory, over the client's
// prefs; a browser that is not Chromium gets no Chromium prefs.
func TestWithDownloadDir(t *testing.T) {
	body := []byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":["--headless"],"prefs":{"download.default_directory":"/elsewhere","intl.accept_languages":"de"}}},"firstMatch":[{}]}}`)
	var got struct {
		Capabilities struct {
			AlwaysMatch struct {
				Chrome map[string]any `json:"goog:chromeOptions"`
			} `json:"alwaysMatch"`
		}
	}
	if err := json.Unmarshal(withDownloadDir(body, "/tmp/s1"), &got); err != nil {
		t.Fatal(err)
	}
	prefs := got.Capabilities.AlwaysMatch.Chrome["prefs"].(map[string]any)
	if prefs["download.default_directory"] != "/tmp/s1" || prefs["intl.accept_languages"] != "de" || got.Capabilities.AlwaysMatch.Chrome["args"] == nil {
		t.Fatalf("prefs %v", prefs)
	}
	ff := withDownloadDir([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"firefox","moz:firefoxOptions":{"prefs":{"browser.download.dir":"/home/hub/.config/autostart","browser.download.folderList":1}}},"firstMatch":[{}]}}`), "/tmp/s1")
	if strings.Contains(string(ff), "chromeOptions") {
		t.Fatalf("firefox got Chromium prefs: %s", ff)
	}
	var fox struct {
		Capabilities struct {
			AlwaysMatch struct {
				Firefox struct {
					Prefs map[string]any `json:"prefs"`
				} `json:"moz:firefoxOptions"`
			} `json:"alwaysMatch"`
		}
	}
	json.Unmarshal(ff, &fox)
	if p := fox.Capabilities.AlwaysMatch.Firefox.Prefs; p["browser.download.dir"] != "/tmp/s1" || p["browser.download.folderList"] != 2.0 || p["browser.download.useDownloadDir"] != true {
		t.Fatalf("firefox's downloads are not the session's: %v", p)
	}
	// A JSONWire client's body (webdriver.DriverBody) too: its prefs must not
	// choose where a page's downloads are written on the host.
	var legacy struct {
		Desired struct {
			Chrome map[string]any `json:"goog:chromeOptions"`
		} `json:"desiredCapabilities"`
	}
	jw := webdriver.DriverBody(map[string]any{"browserName": "chrome", "chromeOptions": map[string]any{"prefs": map[string]any{"download.default_directory": "/etc/cron.d"}}}, false, nil)
	if err := json.Unmarshal(withDownloadDir(jw, "/tmp/s1"), &legacy); err != nil {
		t.Fatal(err)
	}
	if prefs, _ := legacy.Desired.Chrome["prefs"].(map[string]any); prefs["download.default_directory"] != "/tmp/s1" || prefs["savefile.default_directory"] != "/tmp/s1" {
		t.Fatalf("JSONWire prefs %v", legacy.Desired.Chrome)
	}
}

// A sandboxed MiniBrowser is told the sandbox's proxy by its flag, after the
// entry's and the client's arguments (MiniBrowser takes the last of a flag);
// another browser's body, which reads the proxy from its environment, is
// left as it is.
func TestWithProxyFlag(t *testing.T) {
	proxy := &url.URL{Scheme: "http", Host: "127.0.0.1:3128"}
	mini := webdriver.DriverBody(map[string]any{"browserName": "MiniBrowser",
		"webkitgtk:browserOptions": map[string]any{"args": []any{"--proxy=http://elsewhere:1"}}}, true,
		map[string]any{"webkitgtk:browserOptions": map[string]any{"binary": "/usr/lib/MiniBrowser", "args": []any{"--automation"}}})
	var got struct {
		Capabilities struct {
			AlwaysMatch struct {
				WebKit struct {
					Binary string   `json:"binary"`
					Args   []string `json:"args"`
				} `json:"webkitgtk:browserOptions"`
			} `json:"alwaysMatch"`
		}
	}
	if err := json.Unmarshal(withProxyFlag(mini, proxy), &got); err != nil {
		t.Fatal(err)
	}
	wk := got.Capabilities.AlwaysMatch.WebKit
	if n := len(wk.Args); wk.Binary != "/usr/lib/MiniBrowser" || n < 2 || wk.Args[n-1] != "--proxy=http://127.0.0.1:3128" || !slices.Contains(wk.Args, "--automation") {
		t.Fatalf("MiniBrowser's options %+v: want the entry's binary and arguments, the sandbox's proxy last", wk)
	}
	chrome := webdriver.DriverBody(map[string]any{"browserName": "chrome"}, true, nil)
	if out := withProxyFlag(chrome, proxy); !bytes.Equal(out, chrome) {
		t.Fatalf("a Chromium body was changed: %s", out)
	}
}
