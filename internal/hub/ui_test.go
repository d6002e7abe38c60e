package hub

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
)

// The status page is served from the binary, and its state holds the live
// sessions the caller may see, the queue's counts and refusals by reason.
func TestStatusPageState(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1, Timeout: 0}, Options{Auth: authStore(t, "ops")}, &stubLauncher{})
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
		req.SetBasicAuth("alice", "alice-pw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(body) < 100 || strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
			t.Fatalf("%s: %d, %d bytes (and nothing fetched from elsewhere)", path, resp.StatusCode, len(body))
		}
	}
	code, _, created := as(t, f, "alice", "POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"nightly"}}}}`)
	if code != 200 {
		t.Fatalf("create: %d %v", code, created)
	}
	id := created["value"].(map[string]any)["sessionId"].(string)
	req, _ := http.NewRequest("POST", f.srv.URL+"/session", strings.NewReader(w3cChrome))
	req.SetBasicAuth("bob", "bob-pw")
	req.Header.Set(NoWaitHeader, "1")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 429 {
		t.Fatalf("a no-wait request while full: %v %v", resp, err)
	}

	_, _, st := as(t, f, "alice", "GET", "/ui/state", "")
	sessions := st["sessions"].([]any)
	if len(sessions) != 1 || sessions[0].(map[string]any)["id"] != id || sessions[0].(map[string]any)["name"] != "nightly" {
		t.Fatalf("alice's state: %v", sessions)
	}
	if st["slots"].(map[string]any)["used"] != 1.0 || st["engine"].(map[string]any)["ready"] != true ||
		st["rejected"].(map[string]any)["no_wait"] != 1.0 {
		t.Fatalf("state: %v", st)
	}
	_, _, other := as(t, f, "bob", "GET", "/ui/state", "")
	if len(other["sessions"].([]any)) != 0 || other["otherSessions"] != 1.0 {
		t.Fatalf("bob sees %v, others %v; want none listed and one counted", other["sessions"], other["otherSessions"])
	}
	as(t, f, "alice", "DELETE", "/session/"+id, "")
}

// The page runs its own script only, whatever a name on it holds, and a
// path it does not have is a W3C error, as everywhere on the hub.
func TestStatusPagePolicy(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	for _, c := range []struct{ method, path string }{{"GET", "/ui/"}, {"GET", "/ui/app.js"}, {"HEAD", "/ui/style.css"}, {"GET", "/ui/state"}, {"HEAD", "/ui/state"}} {
		req, _ := http.NewRequest(c.method, f.srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if resp.StatusCode != 200 || !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: %d, policy %q, nosniff %q", c.method, c.path, resp.StatusCode, csp, resp.Header.Get("X-Content-Type-Options"))
		}
	}
	for _, path := range []string{"/ui/nope", "/ui/nope/", "/ui/app.js/x"} {
		resp, body := f.do("GET", path, "")
		if code, msg := errOf(body); resp.StatusCode != 404 || code != "unknown command" || !strings.Contains(msg, path) {
			t.Errorf("GET %s: %d %q %q, want 404 unknown command naming it", path, resp.StatusCode, code, msg)
		}
	}
}

// At 500 sessions and 5,000 waiters the page's state stays small (counts, no
// list of waiters) and cheap to compute; nothing runs for the page between
// requests. Reported: go test -run '^$' -bench StatusPageState ./internal/hub
func BenchmarkStatusPageState(b *testing.B) {
	l := &stubLauncher{mem: newMemTransport()}
	f := newFixture(b, queue.Options{Limit: 500, Timeout: 0}, Options{}, l)
	for range 500 {
		if r, body := f.do("POST", "/session", w3cChrome); r.StatusCode != 200 {
			b.Fatalf("create: %v", body)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 5000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if slot, out := f.q.Acquire(ctx, queue.Request{}); out.Admitted {
				slot.Release()
			}
		}()
	}
	for f.q.Stats().Waiting < 5000 {
		runtime.Gosched()
	}
	b.Cleanup(func() { cancel(); wg.Wait() })
	rec := httptest.NewRecorder()
	f.hub.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/state", nil))
	var st struct {
		Queue    struct{ Waiting int }
		Sessions []uiSession
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Queue.Waiting != 5000 || len(st.Sessions) != 500 {
		b.Fatalf("state: %d waiting, %d sessions, %v", st.Queue.Waiting, len(st.Sessions), err)
	}
	size := rec.Body.Len()
	for b.Loop() {
		rec := httptest.NewRecorder()
		f.hub.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/state", nil))
	}
	b.ReportMetric(float64(size), "state-bytes")
}
