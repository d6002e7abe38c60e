package hub

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
)

// sideRequest is one request to a session's side channel.
type sideRequest struct {
	method, path string
	upgrade      bool // sent as a WebSocket handshake
}

// sideRequests is every side channel of a live session, as a client asks for it.
func sideRequests(id string) []sideRequest {
	return []sideRequest{
		{"GET", "/vnc/" + id, true},
		{"GET", "/devtools/" + id, true},
		{"GET", "/devtools/" + id + "/json/version", false},
		{"GET", "/logs/" + id, false},
		{"GET", "/logs/" + id, true},
		{"GET", "/download/" + id + "/", false},
		{"GET", "/download/" + id + "/report.txt", false},
		{"DELETE", "/download/" + id + "/report.txt", false},
		{"GET", "/clipboard/" + id, false},
		{"POST", "/clipboard/" + id, false},
		{"GET", "/session/" + id + "/se/bidi", true},
		{"GET", "/session/" + id + "/se/files", false},
		{"GET", "/session/" + id + "/aerokube/download/", false},
		{"GET", "/session/" + id + "/aerokube/download/report.txt", false},
		{"GET", "/session/" + id + "/aerokube/vnc", true},
		{"GET", "/session/" + id + "/aerokube/devtools", true},
		{"GET", "/session/" + id + "/aerokube/devtools/json/version", false},
		{"GET", "/session/" + id + "/aerokube/logs", false},
		{"GET", "/session/" + id + "/aerokube/logs", true},
	}
}

// sideAs sends r as user and returns the status and, unless the answer is a
// stream that may not end (a 2xx or 101), its W3C error code. The body of
// such a stream is not read: the request's context ends it.
func sideAs(t *testing.T, base, user string, r sideRequest) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, r.method, base+r.path, strings.NewReader("hello"))
	req.SetBasicAuth(user, user+"-pw")
	if r.upgrade {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", r.method, r.path, user, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 300 {
		return resp.StatusCode, ""
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var body map[string]any
	_ = json.Unmarshal(data, &body)
	code, _ := errOf(body)
	return resp.StatusCode, code
}

// No side channel of a session answers another user, and nothing of theirs
// reaches the session's browser: VNC, DevTools, the live log, downloads, the
// clipboard, BiDi and Grid's file endpoints each answer invalid session id
// exactly as for a session that does not exist, while the owner is served;
// kept videos and logs are the operator's alone.
func TestSideChannelsBelongToTheirOwners(t *testing.T) {
	var reached atomic.Int64
	services := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(services.Close)
	su, _ := url.Parse(services.URL)
	vnc, _ := url.Parse("tcp://" + su.Host)
	l := &stubLauncher{sides: func(e *launcher.Endpoints) {
		e.VNC, e.DevTools, e.Files, e.Clipboard = vnc, su, su, su
		e.Log = launcher.NewBroadcast()
	}}
	videos, logs := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(videos, "alice.mp4"), []byte("video"), 0o600)
	os.WriteFile(filepath.Join(logs, "alice.log"), []byte("log"), 0o600)
	f := newFixture(t, queue.Options{Limit: 2}, Options{Auth: authStore(t, "ops"), VideoDir: videos, LogDir: logs}, l)

	_, _, body := as(t, f, "alice", "POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)

	for _, r := range sideRequests(id) {
		status, code := sideAs(t, f.srv.URL, "bob", r)
		// What a session that never existed answers, for comparison: bob must
		// not learn that alice's exists.
		unknown := r
		unknown.path = strings.Replace(r.path, id, "0123456789abcdef0123456789abcdef", 1)
		ustatus, ucode := sideAs(t, f.srv.URL, "bob", unknown)
		// /logs/{name} is also where kept logs are, the operator's alone: a
		// name that is no session of bob's is refused as one of those.
		want, wantCode := http.StatusNotFound, "invalid session id"
		if strings.HasPrefix(r.path, "/logs/") {
			want, wantCode = http.StatusForbidden, "unknown error"
		}
		if status != want || code != wantCode || status != ustatus || code != ucode {
			t.Errorf("bob: %s %s (upgrade %v) of alice's session: %d %q; an unknown session's: %d %q; want both %d %q",
				r.method, r.path, r.upgrade, status, code, ustatus, ucode, want, wantCode)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d of bob's requests reached alice's browser services", n)
	}
	if f.sess.Len() != 1 {
		t.Fatal("bob's requests ended alice's session")
	}

	// The owner is served by the same handlers: each goes past the session
	// check (a refusal, if any, is not invalid session id), and the browser's
	// services are reached, so bob's zero above is not for want of wiring.
	for _, r := range sideRequests(id) {
		if status, code := sideAs(t, f.srv.URL, "alice", r); code == "invalid session id" || status == http.StatusForbidden {
			t.Errorf("alice: %s %s (upgrade %v) of her own session: %d %q", r.method, r.path, r.upgrade, status, code)
		}
	}
	if reached.Load() == 0 {
		t.Fatal("none of alice's requests reached her browser's services")
	}

	for _, p := range []string{"/video/", "/video/alice.mp4", "/logs/", "/logs/alice.log"} {
		for _, m := range []string{"GET", "DELETE"} {
			if m == "DELETE" && strings.HasSuffix(p, "/") {
				continue
			}
			for _, user := range []string{"bob", "alice"} {
				if status, code := sideAs(t, f.srv.URL, user, sideRequest{method: m, path: p}); status != http.StatusForbidden || code == "" {
					t.Errorf("%s: %s %s: %d %q, want 403 (kept files are the operator's)", user, m, p, status, code)
				}
			}
		}
		if status, _ := sideAs(t, f.srv.URL, "ops", sideRequest{method: "GET", path: p}); status != http.StatusOK {
			t.Errorf("ops: GET %s: %d, want 200", p, status)
		}
	}
	if _, err := os.Stat(filepath.Join(videos, "alice.mp4")); err != nil {
		t.Errorf("a user's DELETE removed a kept video: %v", err)
	}
}
