package hub

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/hostile"
	"github.com/websummoner/websummoner/internal/queue"
)

func hostileLauncher(at map[hostile.Phase]hostile.Fault) *stubLauncher {
	return &stubLauncher{wrap: func(h http.Handler) http.Handler { return hostile.Wrap(h, hostile.Options{At: at}) }}
}

// A driver whose new-session answer is hostile, over the hub's Transport to
// drivers (as in production): the client gets a W3C error saying which phase failed and why,
// a redirect is never followed, and no session, slot or driver is left.
func TestNewSessionAgainstHostileDriver(t *testing.T) {
	// Only the hanging driver needs the attempt timeout to strike, and it can
	// only end by it; every other fault must be told apart from a timeout, so its
	// limit is one no load reaches (reading 16 MiB under -race on a busy machine
	// is slow): a fault reported as a timeout then fails on its message.
	const generous = 5 * time.Minute
	for _, tc := range []struct {
		fault   hostile.Fault
		timeout time.Duration
		msg     string
	}{
		{hostile.BrokenBody, generous, "reading the driver's new-session answer"},
		{hostile.Exit, generous, "the driver's new-session call failed"},
		{hostile.Huge, generous, "larger than 16 MiB"},
		{hostile.Garbage, generous, "the driver's new-session answer"},
		{hostile.Redirect, generous, "answered 307"},
		{hostile.Hang, 2 * time.Second, "within -session-attempt-timeout 2s"},
	} {
		t.Run(string(tc.fault), func(t *testing.T) {
			l := hostileLauncher(map[hostile.Phase]hostile.Fault{hostile.PhaseNewSession: tc.fault})
			fx := newFixture(t, queue.Options{Limit: 1}, Options{SessionAttemptTimeout: tc.timeout}, l)
			resp, body := fx.do("POST", "/session", w3cChrome)
			v, _ := body["value"].(map[string]any)
			msg, _ := v["message"].(string)
			if resp.StatusCode != http.StatusInternalServerError || v["error"] != "session not created" || !strings.Contains(msg, tc.msg) {
				t.Fatalf("answered %d %v %q, want 500 session not created containing %q", resp.StatusCode, v["error"], msg, tc.msg)
			}
			if fx.sess.Len() != 0 || fx.q.Stats().InUse != 0 || l.liveCount() != 0 {
				t.Fatalf("leak: sessions %d, slots %d, drivers %d", fx.sess.Len(), fx.q.Stats().InUse, l.liveCount())
			}
		})
	}
}

// A driver whose DELETE answer breaks off, is garbage or is too large: the client
// still gets 200, and the session, its slot and its driver are gone.
func TestDeleteAgainstHostileDriver(t *testing.T) {
	for _, f := range []hostile.Fault{hostile.BrokenBody, hostile.Exit, hostile.Huge, hostile.Garbage, hostile.Redirect, hostile.Hang} {
		t.Run(string(f), func(t *testing.T) {
			l := hostileLauncher(map[hostile.Phase]hostile.Fault{hostile.PhaseDelete: f})
			fx := newFixture(t, queue.Options{Limit: 1}, Options{SessionDeleteTimeout: 2 * time.Second}, l)
			_, body := fx.do("POST", "/session", w3cChrome)
			id := body["value"].(map[string]any)["sessionId"].(string)
			resp, _ := fx.do("DELETE", "/wd/hub/session/"+id, "")
			if resp.StatusCode != 200 {
				t.Fatalf("DELETE answered %d", resp.StatusCode)
			}
			fx.ev.Wait(t, "[SESSION_DELETED]", 10*time.Second) // the teardown runs after the answer
			if fx.sess.Len() != 0 || fx.q.Stats().InUse != 0 || l.liveCount() != 0 {
				t.Fatalf("leak: sessions %d, slots %d, drivers %d", fx.sess.Len(), fx.q.Stats().InUse, l.liveCount())
			}
		})
	}
}

// A command whose answer breaks off mid-body aborts the client's response, but
// the command's in-flight mark is given back: the idle clock runs again and the
// session can be deleted.
func TestCommandBodyBreaksOff(t *testing.T) {
	l := hostileLauncher(map[hostile.Phase]hostile.Fault{hostile.PhaseCommand: hostile.BrokenBody})
	fx := newFixture(t, queue.Options{Limit: 1}, Options{IdleTimeout: time.Second}, l)
	_, body := fx.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	resp, err := http.Get(fx.srv.URL + "/session/" + id + "/url")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a broken answer reached the client whole")
	}
	fx.ev.Wait(t, "[SESSION_TIMED_OUT]", 10*time.Second) // the idle clock restarted after the aborted command
	if fx.q.Stats().InUse != 0 || l.liveCount() != 0 {
		t.Fatal("the aborted command's session kept its slot or driver")
	}
}

// A command in flight when its session is deleted gets invalid session id, not
// a gateway error.
func TestCommandInFlightWhenSessionEnds(t *testing.T) {
	arrived := make(chan struct{}, 1)
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		hang := hostile.Wrap(h, hostile.Options{At: map[hostile.Phase]hostile.Fault{hostile.PhaseCommand: hostile.Hang}})
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/execute/async") {
				arrived <- struct{}{}
			}
			hang.ServeHTTP(w, r)
		})
	}}
	fx := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := fx.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	type answer struct {
		status int
		body   map[string]any
	}
	got := make(chan answer, 1)
	go func() {
		resp, body := fx.do("POST", "/session/"+id+"/execute/async", `{"script":"","args":[]}`)
		got <- answer{resp.StatusCode, body}
	}()
	<-arrived // the command is at the driver
	fx.do("DELETE", "/session/"+id, "")
	a := <-got
	if code, msg := errOf(a.body); a.status != 404 || code != "invalid session id" || !strings.Contains(msg, "deleted") {
		t.Fatalf("%d %q %q", a.status, code, msg)
	}
}

// A panic in a creation phase (a launcher bug) still gives the slot back.
func TestPanicInAPhaseReleasesTheSlot(t *testing.T) {
	l := &stubLauncher{panics: true}
	fx := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	if _, err := http.Post(fx.srv.URL+"/session", "application/json", strings.NewReader(w3cChrome)); err == nil {
		t.Fatal("a panicking creation was answered")
	}
	if st := fx.q.Stats(); st.InUse != 0 {
		t.Fatalf("slot leaked by a panic: %+v", st)
	}
}

// A driver answers the session id it likes (the container may be the
// client's): an id this hub has used, or that a kept video or log is named
// after, is refused, so that no session is taken for another's (its kept
// files are served to the owner of the session of that id), and nothing of
// the refused start is left.
func TestDriverChosenSessionID(t *testing.T) {
	var chosen atomic.Value
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.URL.Path != "/session" {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			var answer map[string]map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || answer["value"] == nil {
				t.Errorf("the stub's new-session answer: %s", rec.Body)
				return
			}
			answer["value"]["sessionId"] = chosen.Load().(string)
			writeJSON(w, http.StatusOK, answer)
		})
	}}
	videos, logs := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(videos, "bobs.mp4"), []byte("video"), 0o644)
	os.WriteFile(filepath.Join(logs, "report.log"), []byte("log"), 0o644)
	fx := newFixture(t, queue.Options{Limit: 1}, Options{VideoDir: videos, LogDir: logs}, l)
	create := func(id string) (int, string) {
		chosen.Store(id)
		resp, body := fx.do("POST", "/session", w3cChrome)
		v, _ := body["value"].(map[string]any)
		msg, _ := v["message"].(string)
		return resp.StatusCode, msg
	}
	for _, id := range []string{"bobs", "report"} {
		if status, msg := create(id); status != http.StatusInternalServerError || !strings.Contains(msg, "already used") {
			t.Errorf("a driver's id %q that a kept file is named after: %d %q, want 500 saying the id was used", id, status, msg)
		}
		if fx.sess.Len() != 0 || fx.q.Stats().InUse != 0 || l.liveCount() != 0 {
			t.Fatalf("leak after a refused id: sessions %d, slots %d, drivers %d", fx.sess.Len(), fx.q.Stats().InUse, l.liveCount())
		}
	}
	if status, msg := create("fresh"); status != http.StatusOK {
		t.Fatalf("a fresh id: %d %q", status, msg)
	}
	if resp, _ := fx.do("DELETE", "/session/fresh", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	fx.ev.Wait(t, "[SESSION_DELETED]", 10*time.Second)
	if status, msg := create("fresh"); status != http.StatusInternalServerError || !strings.Contains(msg, "already used") {
		t.Errorf("an ended session's id again: %d %q, want 500", status, msg)
	}
	if fx.sess.Len() != 0 || fx.q.Stats().InUse != 0 || l.liveCount() != 0 {
		t.Fatalf("leak: sessions %d, slots %d, drivers %d", fx.sess.Len(), fx.q.Stats().InUse, l.liveCount())
	}
}
