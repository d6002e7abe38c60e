package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
)

// /video/ lists only finished videos, serves one with Range, removes one, and
// refuses names that reach outside the directory.
func TestVideoEndpoints(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "run-1.mp4"), []byte("0123456789"), 0o644)
	os.WriteFile(filepath.Join(dir, ".run-2.mp4.1a2b.part"), []byte("still being written"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	f := newFixture(t, queue.Options{Limit: 1}, Options{VideoDir: dir}, &stubLauncher{})

	resp, err := http.Get(f.srv.URL + "/video/?json")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	json.NewDecoder(resp.Body).Decode(&names)
	resp.Body.Close()
	if !slices.Equal(names, []string{"run-1.mp4"}) {
		t.Fatalf("listed %v, want only the finished run-1.mp4", names)
	}
	resp, _ = http.Get(f.srv.URL + "/video/")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `href="run-1.mp4"`) || strings.Contains(string(page), "part") {
		t.Fatalf("HTML listing: %s", page)
	}

	req, _ := http.NewRequest("GET", f.srv.URL+"/video/run-1.mp4", nil)
	req.Header.Set("Range", "bytes=2-5")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || string(part) != "2345" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "inline") {
		t.Fatalf("Range: %d %q %q", resp.StatusCode, part, resp.Header.Get("Content-Disposition"))
	}

	for _, bad := range []string{"..%2Frun-1.mp4", "%2E%2E", ".run-2.mp4.1a2b.part", "a%5Cb"} {
		if r, body := f.do("GET", "/video/"+bad, ""); r.StatusCode != 400 && r.StatusCode != 404 {
			t.Errorf("GET /video/%s: %d %v", bad, r.StatusCode, body)
		}
	}
	if r, _ := f.do("DELETE", "/video/sub", ""); r.StatusCode != 404 {
		t.Errorf("DELETE of a directory: %d", r.StatusCode)
	}
	if r, _ := f.do("DELETE", "/video/run-1.mp4", ""); r.StatusCode != 200 {
		t.Fatalf("DELETE: %d", r.StatusCode)
	}
	if _, err := os.Stat(filepath.Join(dir, "run-1.mp4")); !os.IsNotExist(err) {
		t.Fatal("the video is still there after DELETE")
	}
	if r, body := f.do("GET", "/video/run-1.mp4", ""); r.StatusCode != 404 {
		t.Fatalf("GET after DELETE: %d %v", r.StatusCode, body)
	}

	none := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	if r, body := none.do("GET", "/video/", ""); r.StatusCode != 500 || !strings.Contains(body["value"].(map[string]any)["message"].(string), "-video-output-dir") {
		t.Fatalf("a hub that records nothing: %d %v", r.StatusCode, body)
	}
}

// Videos of every user's sessions are served to admins only.
func TestVideosAreForAdmins(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "v.mp4"), []byte("x"), 0o644)
	f := newFixture(t, queue.Options{Limit: 1}, Options{VideoDir: dir, Auth: authStore(t, "ops")}, &stubLauncher{})
	if code, _, _ := as(t, f, "alice", "DELETE", "/video/v.mp4", ""); code != 403 {
		t.Fatalf("a user deleted a video: %d", code)
	}
	if code, _, _ := as(t, f, "ops", "DELETE", "/video/v.mp4", ""); code != 200 {
		t.Fatalf("an admin could not delete a video: %d", code)
	}
}

// A user fetches the video and log their own session is kept under by
// default ({session-id}.mp4, {session-id}.log), live or ended, as ggr's
// clients do; nobody else's, no listing, and no name a client chose.
func TestOwnSessionsKeptFiles(t *testing.T) {
	videos, logs := t.TempDir(), t.TempDir()
	f := newFixture(t, queue.Options{Limit: 2}, Options{VideoDir: videos, LogDir: logs, Auth: authStore(t, "ops")}, &stubLauncher{})
	_, _, body := as(t, f, "alice", "POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	for _, p := range []string{filepath.Join(videos, id+".mp4"), filepath.Join(logs, id+".log"), filepath.Join(videos, "chosen.mp4")} {
		os.WriteFile(p, []byte("kept"), 0o644)
	}
	get := func(user, path string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
		req.SetBasicAuth(user, user+"-pw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	check := func(when string) {
		t.Helper()
		for _, c := range []struct {
			user, path string
			want       int
		}{
			{"alice", "/video/" + id + ".mp4", 200}, {"alice", "/logs/" + id + ".log", 200},
			{"bob", "/video/" + id + ".mp4", 403}, {"bob", "/logs/" + id + ".log", 403},
			{"alice", "/video/", 403}, {"alice", "/video/chosen.mp4", 403}, {"ops", "/video/chosen.mp4", 200},
		} {
			if got := get(c.user, c.path); got != c.want {
				t.Errorf("%s: %s GET %s: %d, want %d", when, c.user, c.path, got, c.want)
			}
		}
	}
	check("live")
	if code, _, _ := as(t, f, "alice", "DELETE", "/session/"+id, ""); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}
	check("ended")
	if code, _, _ := as(t, f, "alice", "DELETE", "/video/"+id+".mp4", ""); code != 200 {
		t.Fatalf("the owner could not delete her session's video: %d", code)
	}
}

// A client cannot name its video or log after another session's own: every
// user reads the ids in /status, and a file saved first under "{id}.mp4"
// would be served to that session's owner as hers, while hers went to a
// name only admins read.
func TestNoKeptNameOfAnotherSession(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 8}, Options{VideoDir: t.TempDir(), LogDir: t.TempDir(), Auth: authStore(t, "ops")}, &stubLauncher{})
	_, _, body := as(t, f, "alice", "POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	named := func(key, name string) string {
		return `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"` + key + `":"` + name + `"}}}}`
	}
	check := func(when string) {
		t.Helper()
		for _, c := range []struct{ key, name string }{{"videoName", id + ".mp4"}, {"logName", id + ".log"}} {
			code, _, body := as(t, f, "bob", "POST", "/session", named(c.key, c.name))
			if code != 400 || !strings.Contains(fmt.Sprint(body), "is the name session "+id) {
				t.Errorf("%s: bob's %s %q: %d %v, want a 400 naming the session", when, c.key, c.name, code, body)
			}
		}
	}
	check("live")
	if code, _, _ := as(t, f, "alice", "DELETE", "/session/"+id, ""); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}
	check("ended")
	// Another name is the client's to choose.
	code, _, body := as(t, f, "bob", "POST", "/session", named("videoName", "checkout.mp4"))
	if code != 200 {
		t.Fatalf("videoName checkout.mp4: %d %v", code, body)
	}
}

// A malformed WebSocket opening of /vnc or /logs is told in a W3C error,
// before the side channel is counted or its peer dialled: websocket's own
// answer was a plain-text line without a length, after both.
func TestMalformedSocketOpenings(t *testing.T) {
	l := &stubLauncher{sides: func(e *launcher.Endpoints) { e.VNC = echoServer(t); e.Log = launcher.NewBroadcast() }}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"enableVNC":true}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)
	good := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
	for _, c := range []struct {
		name, method, header, value, want string
	}{
		{"POST", "POST", "", "", "opens with GET, not POST"},
		{"no Connection: Upgrade", "GET", "Connection", "keep-alive", `"Connection: Upgrade"`},
		{"no key", "GET", "Sec-WebSocket-Key", "", "has a Sec-WebSocket-Key"},
		{"version 8", "GET", "Sec-WebSocket-Version", "8", "speaks WebSocket version 13"},
	} {
		for _, path := range []string{"/vnc/" + id, "/logs/" + id} {
			var hdr []string
			for k, v := range good {
				if k == c.header {
					v = c.value
				}
				hdr = append(hdr, k, v)
			}
			resp, body := f.do(c.method, path, "", hdr...)
			if code, msg := errOf(body); resp.StatusCode != 400 || code != "invalid argument" || !strings.Contains(msg, c.want) {
				t.Errorf("%s %s: %d %s %q, want 400 invalid argument saying %q", c.name, path, resp.StatusCode, code, msg, c.want)
			}
		}
	}
	f.hub.side.mu.Lock()
	defer f.hub.side.mu.Unlock()
	if len(f.hub.side.bySession) != 0 {
		t.Errorf("refused openings still counted: %v", f.hub.side.bySession)
	}
}

// echoServer stands in for a browser's VNC server (e2e/liveview_test.go has the
// real x11vnc): it echoes what it reads.
func echoServer(t *testing.T) *url.URL {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return &url.URL{Scheme: "tcp", Host: ln.Addr().String()}
}

// /vnc/{id} carries bytes both ways in binary frames for a session with
// enableVNC, closes when the session ends, and refuses everything else clearly.
func TestVNCThroughHub(t *testing.T) {
	vnc := echoServer(t)
	l := &stubLauncher{sides: func(e *launcher.Endpoints) { e.VNC = vnc }}
	f := newFixture(t, queue.Options{Limit: 2}, Options{}, l)
	_, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"enableVNC":true}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)
	_, plain := f.do("POST", "/session", w3cChrome)
	plainID := plain["value"].(map[string]any)["sessionId"].(string)

	if r, body := f.do("GET", "/vnc/"+plainID, ""); r.StatusCode != 500 || !strings.Contains(body["value"].(map[string]any)["message"].(string), "enableVNC") {
		t.Fatalf("a session without enableVNC: %d %v", r.StatusCode, body)
	}
	if r, _ := f.do("GET", "/vnc/"+id, ""); r.StatusCode != 400 {
		t.Fatalf("a plain GET of the socket: %d", r.StatusCode)
	}
	if r, _ := f.do("GET", "/vnc/no-such-session", ""); r.StatusCode != 404 {
		t.Fatalf("an unknown session: %d", r.StatusCode)
	}

	host := strings.TrimPrefix(f.srv.URL, "http://")
	ws, err := websocket.Dial("ws://"+host+"/vnc/"+id, "", "http://ui.elsewhere.example/")
	if err != nil {
		t.Fatal(err)
	}
	ws.PayloadType = websocket.BinaryFrame
	ws.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte("RFB 003.008\n\x00\xff")
	ws.Write(msg)
	// Read as a frame, so its type is seen: a VNC client (noVNC) takes only
	// binary frames.
	fr, err := ws.NewFrameReader()
	if err != nil {
		t.Fatalf("reading the echo's frame: %v", err)
	}
	frame, err := io.ReadAll(fr)
	if err != nil || string(frame) != string(msg) || fr.PayloadType() != websocket.BinaryFrame {
		t.Fatalf("echo through /vnc/: %q %v, frame type %d (want binary, %d)", frame, err, fr.PayloadType(), websocket.BinaryFrame)
	}
	// Watching does not hold the session: the idle timer and DELETE work as usual.
	f.do("DELETE", "/session/"+id, "")
	if err := websocket.Message.Receive(ws, &frame); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the socket outlived the session: %v", err)
	}
	ws.Close()
	f.do("DELETE", "/session/"+plainID, "")
}

// screenResolution sizes a Chromium browser's window and headless screen,
// unless the client sized them itself; another browser's body is untouched.
func TestWithScreen(t *testing.T) {
	var got struct {
		Capabilities struct {
			AlwaysMatch struct {
				Chrome struct {
					Args []string `json:"args"`
				} `json:"goog:chromeOptions"`
			} `json:"alwaysMatch"`
		} `json:"capabilities"`
	}
	body := []byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":["--headless"]}},"firstMatch":[{}]}}`)
	json.Unmarshal(withScreen(body, "1280x1024x24"), &got)
	if a := got.Capabilities.AlwaysMatch.Chrome.Args; !slices.Equal(a, []string{"--headless", "--window-size=1280,1024", "--screen-info={1280x1024}"}) {
		t.Fatalf("args %v", a)
	}
	own := []byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":["--window-size=800,600"]}},"firstMatch":[{}]}}`)
	got.Capabilities.AlwaysMatch.Chrome.Args = nil
	json.Unmarshal(withScreen(own, "1280x1024"), &got)
	if a := got.Capabilities.AlwaysMatch.Chrome.Args; !slices.Equal(a, []string{"--window-size=800,600"}) {
		t.Fatalf("the client's own size was overridden: %v", a)
	}
	ff := `{"capabilities":{"alwaysMatch":{"browserName":"firefox"},"firstMatch":[{}]}}`
	if out := string(withScreen([]byte(ff), "1280x1024")); strings.Contains(out, "window-size") {
		t.Fatalf("firefox got Chromium arguments: %s", out)
	}
}

// A VNC viewer that has stopped reading while the screen streams blocks the
// copy's write to it; the session's end still closes the socket and ends the
// handler (Close alone waited for that write's lock for ever).
func TestNonReadingVNCViewerEndsWithItsSession(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	// A screen that never stops changing. It says when its writes have
	// stalled, which is when the hub's copy to the viewer is blocked. If load
	// makes it say so early, the test only checks less: it cannot fail the hub.
	stalled := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		frame := make([]byte, 64<<10)
		for idle := 0; ; {
			_ = c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			n, err := c.Write(frame)
			switch {
			case n > 0:
				idle = 0
			case errors.Is(err, os.ErrDeadlineExceeded):
				if idle++; idle == 3 {
					close(stalled)
				}
			}
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	vnc := &url.URL{Scheme: "vnc", Host: ln.Addr().String()}
	l := &stubLauncher{sides: func(e *launcher.Endpoints) { e.VNC = vnc }}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"enableVNC":true}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)
	cfg, err := websocket.NewConfig("ws://"+strings.TrimPrefix(f.srv.URL, "http://")+"/vnc/"+id, "http://ui.elsewhere.example/")
	if err != nil {
		t.Fatal(err)
	}
	// A small receive buffer: the viewer's side fills at once.
	cfg.Dialer = &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	<-stalled                          // the viewer has read nothing
	f.do("DELETE", "/session/"+id, "") // answered at once; the viewer's socket must close with the session
	f.ev.Wait(t, "[VNC] [closed]", time.Minute)
}

// A kept video or log may have any name a client chose, ".crdownload"
// included: it is listed (only a download of that name is a partial one),
// and a listing answers HEAD, as Selenoid's file server does for uptime
// checks.
func TestKeptListingsShowEveryName(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"x.crdownload", ".v.mp4.0a1b2c3d.part", "run.mp4"} {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644)
	}
	f := newFixture(t, queue.Options{Limit: 1}, Options{VideoDir: dir, LogDir: dir}, &stubLauncher{})
	for _, p := range []string{"/video/?json", "/logs/?json"} {
		resp, err := http.Get(f.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		json.NewDecoder(resp.Body).Decode(&names)
		resp.Body.Close()
		if fmt.Sprint(names) != "[run.mp4 x.crdownload]" {
			t.Errorf("%s lists %v, want [run.mp4 x.crdownload]", p, names)
		}
	}
	for _, p := range []string{"/video/", "/logs/"} {
		req, _ := http.NewRequest("HEAD", f.srv.URL+p, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("HEAD %s: %d", p, resp.StatusCode)
		}
	}
}
