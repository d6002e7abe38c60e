package hub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/websummoner/websummoner/internal/auth"
	"github.com/websummoner/websummoner/internal/queue"
)

func authStore(t *testing.T, admins ...string) *auth.Store {
	t.Helper()
	var b strings.Builder
	for _, u := range []string{"alice", "bob", "ops"} {
		h, _ := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		fmt.Fprintf(&b, "%s:%s\n", u, h)
	}
	f := filepath.Join(t.TempDir(), "htpasswd")
	os.WriteFile(f, []byte(b.String()), 0o600)
	s, err := auth.New(auth.Options{File: f, Admins: admins})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// as sends a request as user ("" = no credentials) and decodes the JSON answer.
func as(t *testing.T, f *fixture, user, method, path, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if user != "" {
		req.SetBasicAuth(user, user+"-pw")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s as %q: %d non-JSON %q", method, path, user, resp.StatusCode, data)
	}
	return resp.StatusCode, resp.Header, out
}

// Each session belongs to its creator: another user gets invalid session id,
// /status shows them the session without its capabilities, an operator sees and
// drives all; probes and /metrics stay open.
func TestSessionsBelongToTheirUsers(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 2}, Options{Auth: authStore(t, "ops")}, &stubLauncher{})
	status, hdr, body := as(t, f, "", "POST", "/wd/hub/session", w3cChrome)
	if code, _ := errOf(body); status != 401 || code == "" || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("no credentials: %d %v %v", status, hdr, body)
	}
	req, _ := http.NewRequest("POST", f.srv.URL+"/session", strings.NewReader(w3cChrome))
	req.SetBasicAuth("alice", "wrong")
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 401 {
		t.Fatalf("wrong password: %d", resp.StatusCode)
	}
	for _, open := range []string{"/ping", "/healthz", "/readyz"} {
		if status, _, _ := as(t, f, "", "GET", open, ""); status != 200 {
			t.Errorf("%s behind authentication: %d", open, status)
		}
	}
	_, _, body = as(t, f, "alice", "POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"alice's","env":["TZ=UTC"]}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)
	if status, _, _ := as(t, f, "alice", "GET", "/session/"+id+"/url", ""); status != 200 {
		t.Fatalf("owner's command: %d", status)
	}
	for _, m := range []string{"GET", "DELETE"} {
		status, _, body := as(t, f, "bob", m, "/session/"+id+"/url", "")
		if m == "DELETE" {
			status, _, body = as(t, f, "bob", m, "/session/"+id, "")
		}
		if code, msg := errOf(body); status != 404 || code != "invalid session id" || !strings.Contains(msg, "not known to this hub") {
			t.Fatalf("bob %s alice's session: %d %q %q", m, status, code, msg)
		}
	}
	if f.sess.Len() != 1 {
		t.Fatal("bob ended alice's session")
	}
	caps := func(user string) (any, any) {
		_, _, st := as(t, f, user, "GET", "/status", "")
		// Alice asked for no version: filed under "", as Selenoid files it;
		// under her name for those who may know it.
		quota := "alice"
		if user == "bob" {
			quota = "unknown"
		}
		s := st["browsers"].(map[string]any)["chrome"].(map[string]any)[""].(map[string]any)[quota].(map[string]any)["sessions"].([]any)[0].(map[string]any)
		return s["id"], s["caps"]
	}
	if sid, c := caps("bob"); sid != id || c != nil {
		t.Fatalf("bob's /status: id %v caps %v", sid, c)
	}
	if _, c := caps("alice"); c == nil {
		t.Fatal("alice's own caps hidden from her")
	}
	if _, c := caps("ops"); c == nil {
		t.Fatal("the operator does not see the caps")
	}
	if status, _, _ := as(t, f, "ops", "DELETE", "/session/"+id, ""); status != 200 || f.sess.Len() != 0 {
		t.Fatalf("the operator's DELETE: %d, %d sessions", status, f.sess.Len())
	}
	// Why it ended is its owner's (and the operator's) to know: to bob it is
	// as any id he might guess.
	for user, want := range map[string]string{"alice": "has ended: it was deleted", "ops": "has ended: it was deleted", "bob": "not known to this hub"} {
		if status, _, body := as(t, f, user, "GET", "/session/"+id+"/url", ""); status != 404 || !strings.Contains(fmt.Sprint(body["value"]), want) {
			t.Errorf("%s's command to alice's ended session: %d %v, want %q", user, status, body, want)
		}
	}
}
