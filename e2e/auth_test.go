package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Authentication with real clients: Python Selenium's user:pass@ URL into real
// Chromium; a ggr-style front that forwards basic auth; one user's session
// invisible to another; an operator who sees and ends it.
func TestAuthenticatedClients(t *testing.T) {
	requireRealParts(t)
	var b strings.Builder
	for _, u := range []string{"alice", "bob", "ops"} {
		h, _ := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		fmt.Fprintf(&b, "%s:%s\n", u, h)
	}
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// Under -htpasswd each browser runs in a sandbox (-process-sandbox auto):
	// the page on the host's loopback reaches it through its sandbox's proxy.
	h := startHub(t, "-limit", "2", "-htpasswd", htpasswd, "-admin-users", "ops")
	page := pageServer(t)
	u, _ := url.Parse(h.url)

	// Python Selenium with the credentials in the URL.
	withCreds := "http://alice:alice-pw@" + u.Host
	shot := filepath.Join(t.TempDir(), "shot.png")
	r, err := runClient(withCreds, page.URL, shot, 0)
	if err != nil {
		t.Fatalf("python client with user:pass@: %v", err)
	}
	checkResult(t, r, shot)
	if _, err := runClient(h.url, page.URL, shot, 0); err == nil || !strings.Contains(err.Error(), "authentication required") {
		t.Fatalf("python client without credentials: %v", err)
	}

	// A ggr-style front: it authenticates its own clients and forwards basic auth.
	front := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		pr.Out.SetBasicAuth("bob", "bob-pw")
	}})
	defer front.Close()
	do := func(base, user, method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if user != "" {
			req.SetBasicAuth(user, user+"-pw")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, data)
		}
		return resp.StatusCode, v
	}
	status, body := do(front.URL, "", "POST", "/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	if status != 200 {
		t.Fatalf("through the front: %d %v", status, body)
	}
	id := body["value"].(map[string]any)["sessionId"].(string)
	if status, _ := do(front.URL, "", "GET", "/wd/hub/session/"+id+"/title", ""); status != 200 {
		t.Fatalf("bob's command through the front: %d", status)
	}
	if status, body := do(h.url, "alice", "GET", "/wd/hub/session/"+id+"/title", ""); status != 404 {
		t.Fatalf("alice drove bob's session: %d %v", status, body)
	}
	if status, _ := do(h.url, "ops", "DELETE", "/wd/hub/session/"+id, ""); status != 200 {
		t.Fatalf("the operator's DELETE: %d", status)
	}
	// The teardown runs after DELETE's answer, holding the slot until done.
	if !waitFor(2*time.Minute, func() bool { return h.getJSONAs(t, "ops", "/status")["used"] == 0.0 }) {
		t.Fatalf("after: %v", h.getJSONAs(t, "ops", "/status"))
	}
	h.stop(t)
}

func (h *hub) getJSONAs(t *testing.T, user, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", h.url+path, nil)
	req.SetBasicAuth(user, user+"-pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
