package hub

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
)

// Selenoid's other spellings of its endpoints, as clients and probes send
// them: the /session/{id}/aerokube/X aliases, /download/{id} and
// /clipboard/{id}/ with or without the slash, /wd/hub's welcome, and the
// probes by HEAD and OPTIONS.

// compat is a hub with two sessions, each with a download directory of its
// own (holding "<id>.txt") and a clipboard service that answers with its
// method, its path (which names the session's driver) and the body it got.
type compat struct {
	f       *fixture
	ids     []string
	reached atomic.Int64 // requests the clipboard services got
	mu      sync.Mutex
	driver  []string // paths the sessions' drivers received
}

func newCompat(t *testing.T, hopts Options, user string) *compat {
	c := &compat{}
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.reached.Add(1)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s|%s", r.Method, r.URL.Path, b)
	}))
	t.Cleanup(cb.Close)
	cbURL, _ := url.Parse(cb.URL)
	files := t.TempDir()
	l := &stubLauncher{
		sides: func(e *launcher.Endpoints) {
			host := strings.ReplaceAll(e.Driver.Host, ":", "_")
			dir := filepath.Join(files, host)
			os.MkdirAll(dir, 0o700)
			e.Files = &url.URL{Scheme: "file", Path: dir}
			e.Clipboard = cbURL.JoinPath("cb", host)
		},
		wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.mu.Lock()
				c.driver = append(c.driver, r.URL.Path)
				c.mu.Unlock()
				h.ServeHTTP(w, r)
			})
		},
	}
	c.f = newFixture(t, queue.Options{Limit: 2}, hopts, l)
	for range 2 {
		var body map[string]any
		if user != "" {
			_, _, body = as(t, c.f, user, "POST", "/session", w3cChrome)
		} else {
			_, body = c.f.do("POST", "/session", w3cChrome)
		}
		id := body["value"].(map[string]any)["sessionId"].(string)
		s, _ := c.f.sess.Get(id)
		os.WriteFile(filepath.Join(s.Endpoints().Files.Path, id+".txt"), []byte(id), 0o600)
		c.ids = append(c.ids, id)
	}
	return c
}

// send sends a request (no redirect followed) and reads the answer's body.
func (c *compat) send(t *testing.T, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, c.f.srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

// names is a ?json listing's names.
func (c *compat) names(t *testing.T, path string) []string {
	t.Helper()
	resp, body := c.send(t, "GET", path, "")
	var names []string
	if err := json.Unmarshal([]byte(body), &names); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET %s: %d %q, not a JSON list of names", path, resp.StatusCode, body)
	}
	return names
}

// driverSaw lists the paths the drivers received that contain s.
func (c *compat) driverSaw(s string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.driver {
		if strings.Contains(p, s) {
			out = append(out, p)
		}
	}
	return out
}

// Selenoid serves /session/{id}/aerokube/X/… as its own /X/{id}/… (path.Clean'd,
// so with or without the slash), under /wd/hub and at the root: the
// clipboard and the download listing are the session's own, as at
// /clipboard/{id} and /download/{id}/, and never reach the driver. Another
// aerokube/… path is still the driver's, as before.
func TestAerokubeAliases(t *testing.T) {
	c := newCompat(t, Options{}, "")
	clips := map[string]bool{}
	for _, id := range c.ids {
		_, get := c.send(t, "GET", "/clipboard/"+id, "")
		_, post := c.send(t, "POST", "/clipboard/"+id, "copied")
		if !strings.HasPrefix(get, "GET /cb/") {
			t.Fatalf("GET /clipboard/%s: %q did not come from the session's clipboard", id, get)
		}
		clips[get] = true
		for _, prefix := range []string{"/wd/hub", ""} {
			base := prefix + "/session/" + id + "/aerokube/"
			for _, p := range []string{"clipboard", "clipboard/"} {
				if resp, got := c.send(t, "GET", base+p, ""); resp.StatusCode != 200 || got != get {
					t.Errorf("GET %s: %d %q; /clipboard/{id} answers %q", base+p, resp.StatusCode, got, get)
				}
				if resp, got := c.send(t, "POST", base+p, "copied"); resp.StatusCode != 200 || got != post {
					t.Errorf("POST %s: %d %q; /clipboard/{id} answers %q", base+p, resp.StatusCode, got, post)
				}
			}
			for _, p := range []string{"download?json", "download/?json"} {
				if got := c.names(t, base+p); !slices.Equal(got, []string{id + ".txt"}) {
					t.Errorf("GET %s lists %q; want the session's own %q", base+p, got, id+".txt")
				}
			}
			if resp, got := c.send(t, "GET", base+"download/"+id+".txt", ""); resp.StatusCode != 200 || got != id {
				t.Errorf("GET %sdownload/%s.txt: %d %q", base, id, resp.StatusCode, got)
			}
		}
	}
	if len(clips) != len(c.ids) {
		t.Fatalf("two sessions' clipboards answered alike: %v", clips)
	}
	// DevTools, VNC and the live log: the alias answers as the hub's own
	// path does (these sessions have none of them, which each says).
	id := c.ids[0]
	for alias, own := range map[string]string{
		"devtools":              "/devtools/" + id,
		"devtools/json/version": "/devtools/" + id + "/json/version",
		"vnc":                   "/vnc/" + id,
		"vnc/":                  "/vnc/" + id,
		"logs":                  "/logs/" + id,
		"logs/":                 "/logs/" + id,
	} {
		want, wantBody := c.f.do("GET", own, "")
		_, wantMsg := errOf(wantBody)
		for _, prefix := range []string{"/wd/hub", ""} {
			resp, body := c.f.do("GET", prefix+"/session/"+id+"/aerokube/"+alias, "")
			if _, msg := errOf(body); resp.StatusCode != want.StatusCode || msg != wantMsg || msg == "" {
				t.Errorf("GET %s/session/{id}/aerokube/%s: %d %q; %s answers %d %q", prefix, alias, resp.StatusCode, msg, own, want.StatusCode, wantMsg)
			}
		}
	}
	if saw := c.driverSaw("aerokube"); len(saw) != 0 {
		t.Fatalf("the driver received the hub's own aerokube paths: %q", saw)
	}

	// An aerokube/… path the hub does not serve goes to the driver, as before.
	c.send(t, "GET", "/session/"+c.ids[0]+"/aerokube/elsewhere", "")
	if saw := c.driverSaw("aerokube/"); len(saw) != 1 || !strings.HasSuffix(saw[0], "/aerokube/elsewhere") {
		t.Fatalf("aerokube/elsewhere: the driver received %q", saw)
	}
	// An unknown session is invalid session id under every alias.
	for _, p := range []string{"clipboard", "clipboard/", "download", "download/", "devtools", "devtools/json/version", "vnc", "logs"} {
		resp, body := c.f.do("GET", "/wd/hub/session/nope/aerokube/"+p, "")
		if code, _ := errOf(body); resp.StatusCode != 404 || code != "invalid session id" {
			t.Errorf("aerokube/%s of an unknown session: %d %v", p, resp.StatusCode, body)
		}
	}
}

// probePaths are the probes and Selenoid's welcome page.
var probePaths = []string{"/", "/welcome", "/ping", "/status", "/wd/hub/status", "/healthz", "/readyz", "/wd/hub", "/wd/hub/"}

// Probes answer HEAD as GET without a body (curl -I, wget --spider) and
// OPTIONS with 200 and Allow (HAProxy's default "option httpchk" sends
// OPTIONS / HTTP/1.0); any other method is still 405 unknown method.
func TestProbesTakeHeadAndOptions(t *testing.T) {
	c := newCompat(t, Options{}, "")
	for _, p := range probePaths {
		get, body := c.send(t, "GET", p, "")
		if get.StatusCode != 200 || body == "" {
			t.Fatalf("GET %s: %d %q", p, get.StatusCode, body)
		}
		head, body := c.send(t, "HEAD", p, "")
		if head.StatusCode != 200 || body != "" || head.Header.Get("Content-Type") != get.Header.Get("Content-Type") {
			t.Errorf("HEAD %s: %d %q, Content-Type %q; GET's is %q", p, head.StatusCode, body, head.Header.Get("Content-Type"), get.Header.Get("Content-Type"))
		}
		opt, body := c.send(t, "OPTIONS", p, "")
		if opt.StatusCode != 200 || body != "" || opt.Header.Get("Allow") != "GET, HEAD, OPTIONS" {
			t.Errorf("OPTIONS %s: %d %q, Allow %q", p, opt.StatusCode, body, opt.Header.Get("Allow"))
		}
		for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
			resp, body := c.f.do(m, p, "{}")
			if code, _ := errOf(body); resp.StatusCode != 405 || code != "unknown method" {
				t.Errorf("%s %s: %d %v; want 405 unknown method", m, p, resp.StatusCode, body)
			}
		}
	}

	// HAProxy's check, byte for byte.
	conn, err := net.Dial("tcp", c.f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "OPTIONS / HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "OPTIONS"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HAProxy's OPTIONS / HTTP/1.0: %v %v", resp, err)
	}
}

// Spellings Selenoid takes: /download/{id} lists (its handler passes "/" to
// the file server), /clipboard/{id}/ is the clipboard, and /wd/hub and
// /wd/hub/ are its welcome page. A browser asking for the listing without
// its slash is sent to the slash spelling, which its relative links need.
func TestSelenoidPathSpellings(t *testing.T) {
	c := newCompat(t, Options{Version: "v-test"}, "")
	id := c.ids[0]
	if got := c.names(t, "/download/"+id+"?json"); !slices.Equal(got, []string{id + ".txt"}) {
		t.Fatalf("/download/{id}?json lists %q", got)
	}
	if resp, page := c.send(t, "GET", "/download/"+id, "", "Accept", "*/*"); resp.StatusCode != 200 || !strings.Contains(page, `<a href="`+id+`.txt">`) {
		t.Fatalf("GET /download/{id} (curl): %d %q", resp.StatusCode, page)
	}
	for path, want := range map[string]string{
		"/download/" + id:                                 "/download/" + id + "/",
		"/download/" + id + "?sort=name":                  "/download/" + id + "/?sort=name",
		"/wd/hub/session/" + id + "/aerokube/download":    "/wd/hub/session/" + id + "/aerokube/download/",
		"/session/" + id + "/aerokube/download?sort=name": "/session/" + id + "/aerokube/download/?sort=name",
	} {
		resp, _ := c.send(t, "GET", path, "", "Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != want {
			t.Errorf("a browser's GET %s: %d to %q; want 301 to %q", path, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
	for _, p := range []string{"/download/" + id + "/", "/wd/hub/session/" + id + "/aerokube/download/", "/session/" + id + "/aerokube/download/"} {
		// The slash spelling is the listing, not a command's trailing slash
		// to drop (which sent a browser round in redirects).
		if resp, page := c.send(t, "GET", p, "", "Accept", "text/html"); resp.StatusCode != 200 || !strings.Contains(page, id+".txt") {
			t.Fatalf("GET %s (a browser): %d %q", p, resp.StatusCode, page)
		}
	}

	_, want := c.send(t, "GET", "/clipboard/"+id, "")
	if resp, got := c.send(t, "GET", "/clipboard/"+id+"/", ""); resp.StatusCode != 200 || got != want {
		t.Fatalf("GET /clipboard/{id}/: %d %q; /clipboard/{id} answers %q", resp.StatusCode, got, want)
	}
	_, want = c.send(t, "POST", "/clipboard/"+id, "copied")
	if resp, got := c.send(t, "POST", "/clipboard/"+id+"/", "copied"); resp.StatusCode != 200 || got != want {
		t.Fatalf("POST /clipboard/{id}/: %d %q; /clipboard/{id} answers %q", resp.StatusCode, got, want)
	}

	for _, p := range []string{"/wd/hub", "/wd/hub/"} {
		if resp, text := c.send(t, "GET", p, ""); resp.StatusCode != 200 || !strings.HasPrefix(text, "You are using WebSummoner v-test") {
			t.Fatalf("GET %s: %d %q", p, resp.StatusCode, text)
		}
	}
}

// The new spellings are a session's side channels like the others: another
// user is answered exactly as for a session that does not exist, and nothing
// of theirs reaches the session's services.
func TestSelenoidSpellingsBelongToTheirOwners(t *testing.T) {
	c := newCompat(t, Options{Auth: authStore(t, "ops")}, "alice")
	id := c.ids[0]
	for _, r := range []sideRequest{
		{"GET", "/download/" + id, false},
		{"GET", "/clipboard/" + id + "/", false},
		{"POST", "/clipboard/" + id + "/", false},
		{"GET", "/session/" + id + "/aerokube/download", false},
		{"GET", "/wd/hub/session/" + id + "/aerokube/download?json", false},
		{"GET", "/session/" + id + "/aerokube/clipboard", false},
		{"POST", "/wd/hub/session/" + id + "/aerokube/clipboard/", false},
	} {
		status, code := sideAs(t, c.f.srv.URL, "bob", r)
		unknown := r
		unknown.path = strings.Replace(r.path, id, "0123456789abcdef0123456789abcdef", 1)
		ustatus, ucode := sideAs(t, c.f.srv.URL, "bob", unknown)
		if status != 404 || code != "invalid session id" || status != ustatus || code != ucode {
			t.Errorf("bob: %s %s of alice's session: %d %q; an unknown session's: %d %q", r.method, r.path, status, code, ustatus, ucode)
		}
		if status, code := sideAs(t, c.f.srv.URL, "alice", r); status != 200 {
			t.Errorf("alice: %s %s of her own session: %d %q", r.method, r.path, status, code)
		}
	}
	if n := c.reached.Load(); n != 4 { // alice's four clipboard requests
		t.Fatalf("the clipboard services got %d requests; want alice's 4", n)
	}
}

// A browsers.json entry without "path" whose driver lives under /wd/hub (a
// Selenium server image) works as it does behind Selenoid: the new session
// is tried there once, and the session's commands and DELETE follow it.
func TestPathlessEntryFindsItsDriverUnderWdHub(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Method+" "+r.URL.Path)
			mu.Unlock()
			rest, ok := strings.CutPrefix(r.URL.Path, "/wd/hub/")
			if !ok {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"value":{"error":"unknown command","message":"not here"}}`)
				return
			}
			r.URL.Path = "/" + rest
			h.ServeHTTP(w, r)
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	resp, body := f.do("POST", "/wd/hub/session", w3cChrome)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("new session: %d %v", resp.StatusCode, body)
	}
	id := sessionID(t, body)
	if resp, body := f.do("POST", "/wd/hub/session/"+id+"/url", `{"url":"about:blank"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("command: %d %v", resp.StatusCode, body)
	}
	if resp, body := f.do("DELETE", "/wd/hub/session/"+id, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %d %v", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"POST /session", "POST /wd/hub/session", "POST /wd/hub/session/" + id + "/url", "DELETE /wd/hub/session/" + id}
	if !slices.Equal(seen, want) {
		t.Fatalf("the driver got %q, want %q", seen, want)
	}
}
