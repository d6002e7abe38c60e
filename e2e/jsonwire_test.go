package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A legacy JSONWire new-session request (desiredCapabilities only, no
// "capabilities") through the hub into a real chromedriver and Chromium, as
// docs/selenoid.md's endpoint table, docs/hub.md and docs/browsers.md promise:
// it works under /wd/hub and under /; it is answered in the JSONWire shape
// (top-level sessionId, status 0, the capabilities as value, no Location);
// the hub reads its options at the top level of desiredCapabilities (name,
// shown in /status); the driver gets a W3C request (its session is a W3C
// one: a missing element is a 404 "no such element", not JSONWire's 200 with
// status 7); a command works; DELETE ends it and frees the slot, and no
// process of the session is left.
func TestJSONWireNewSessionRealChromedriver(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "1")
	page := pageServer(t)
	client := &http.Client{Timeout: 2 * time.Minute} // a hang fails, never holds the suite

	do := func(t *testing.T, method, url, body string) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the answer: %v", method, url, err)
		}
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s %s: %d, not JSON: %q", method, url, resp.StatusCode, data)
		}
		return resp, v
	}

	for _, prefix := range []string{"/wd/hub", ""} {
		t.Run("under "+prefix+"/", func(t *testing.T) {
			name := "jsonwire" + strings.ReplaceAll(prefix, "/", "-")
			body := fmt.Sprintf(`{"desiredCapabilities":{"browserName":"chrome","name":%q}}`, name)
			resp, v := do(t, "POST", h.url+prefix+"/session", body)
			id, _ := v["sessionId"].(string)
			if w, _ := v["value"].(map[string]any); id == "" && w != nil {
				id, _ = w["sessionId"].(string) // a W3C-shaped answer, which fails below
			}
			if id != "" { // a test failing before its DELETE frees the slot for the next
				t.Cleanup(func() {
					if req, err := http.NewRequest("DELETE", h.url+"/session/"+id, nil); err == nil {
						if resp, err := client.Do(req); err == nil {
							resp.Body.Close()
						}
					}
				})
			}
			caps, _ := v["value"].(map[string]any)
			if resp.StatusCode != 200 || v["sessionId"] == nil || v["status"] != 0.0 || caps == nil {
				t.Fatalf("JSONWire new session: %d %v, want 200 with a top-level sessionId, status 0 and the capabilities as value", resp.StatusCode, v)
			}
			if loc := resp.Header.Get("Location"); loc != "" {
				t.Errorf("the new-session answer has a Location header %q", loc)
			}
			if _, w3c := caps["sessionId"]; w3c {
				t.Errorf("the JSONWire answer's value has the W3C shape: %v", caps)
			}
			if caps["browserName"] != "chrome" {
				t.Errorf("the answer's capabilities say browserName %v, want the driver's chrome", caps["browserName"])
			}

			// The hub read name at the top level of desiredCapabilities.
			st := statusView{}
			if err := json.Unmarshal(mustGet(t, client, h.url+"/status"), &st.v); err != nil {
				t.Fatal(err)
			}
			var listed map[string]any
			for _, s := range st.sessions() {
				if s["id"] == id {
					listed = s
				}
			}
			if listed == nil {
				t.Fatalf("/status does not list the JSONWire session %s: %v", id, st.v)
			}
			if c, _ := listed["caps"].(map[string]any); c["name"] != name {
				t.Errorf("/status shows the session's name as %v, want %q from desiredCapabilities", c["name"], name)
			}

			// Commands reach the driver and work.
			base := h.url + prefix + "/session/" + id
			if resp, v := do(t, "POST", base+"/url", fmt.Sprintf(`{"url":%q}`, page.URL)); resp.StatusCode != 200 {
				t.Fatalf("navigate: %d %v", resp.StatusCode, v)
			}
			if resp, v := do(t, "GET", base+"/title", ""); resp.StatusCode != 200 || v["value"] != "WebSummoner e2e" {
				t.Fatalf("title: %d %v", resp.StatusCode, v)
			}
			// A W3C session: the driver was sent W3C capabilities.
			resp, v = do(t, "POST", base+"/element", `{"using":"css selector","value":"#no-such-element"}`)
			if e, _ := v["value"].(map[string]any); resp.StatusCode != 404 || e["error"] != "no such element" {
				t.Errorf("a missing element: %d %v, want a W3C 404 no such element (the driver's session is not a W3C one?)", resp.StatusCode, v)
			}

			if resp, v := do(t, "DELETE", base, ""); resp.StatusCode != 200 {
				t.Fatalf("DELETE: %d %v", resp.StatusCode, v)
			}
			if resp, v := do(t, "GET", base+"/title", ""); resp.StatusCode != 404 {
				t.Errorf("a command after DELETE: %d %v, want 404", resp.StatusCode, v)
			}
			if st := h.settled(t); st["used"] != 0.0 || st["queued"] != 0.0 || st["pending"] != 0.0 {
				t.Fatalf("after DELETE the hub is not idle: %v", st)
			}
			if left := ourProcesses(h.instance); len(left) != 0 {
				t.Fatalf("processes of the deleted session left: %v", left)
			}
		})
	}
	h.stop(t)
}

// mustGet is a GET's body, failing the test on any error or a status not 200.
func mustGet(t *testing.T, client *http.Client, url string) []byte {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v %q", url, resp.StatusCode, err, data)
	}
	return data
}
