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
// docs/selenoid.md's endpoint table and docs/hub.md promise: it works under
// /wd/hub and under /; it is answered in the JSONWire shape (top-level
// sessionId, status 0, the capabilities as value, no Location); the hub reads
// its options at the top level of desiredCapabilities (name, shown in
// /status); the session is a JSONWire one at the driver, as behind Selenoid
// (execute, window_handle, an element's location, ELEMENT references, status
// codes: a missing element is status 7); DELETE ends it and frees the slot,
// and no process of the session is left.
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
			// A JSONWire session at the driver: its commands and answers.
			resp, v = do(t, "POST", base+"/element", `{"using":"css selector","value":"#greeting"}`)
			ref, _ := v["value"].(map[string]any)
			el, _ := ref["ELEMENT"].(string)
			if resp.StatusCode != 200 || v["status"] != 0.0 || el == "" {
				t.Fatalf("find element: %d %v, want status 0 and an ELEMENT reference", resp.StatusCode, v)
			}
			if resp, v := do(t, "GET", base+"/element/"+el+"/text", ""); resp.StatusCode != 200 || v["value"] != "Hello from 127.0.0.1" {
				t.Errorf("the element's text: %d %v", resp.StatusCode, v)
			}
			if resp, v := do(t, "GET", base+"/element/"+el+"/location", ""); resp.StatusCode != 200 || v["status"] != 0.0 {
				t.Errorf("the element's location (JSONWire only): %d %v", resp.StatusCode, v)
			} else if loc, _ := v["value"].(map[string]any); loc["x"] == nil || loc["y"] == nil {
				t.Errorf("the element's location: %v, want x and y", v)
			}
			if resp, v := do(t, "POST", base+"/execute", `{"script":"return 6*7","args":[]}`); resp.StatusCode != 200 || v["value"] != 42.0 {
				t.Errorf("execute (JSONWire's, not W3C's execute/sync): %d %v", resp.StatusCode, v)
			}
			if resp, v := do(t, "GET", base+"/window_handle", ""); resp.StatusCode != 200 || v["value"] == "" || v["value"] == nil {
				t.Errorf("window_handle (JSONWire's, not W3C's window): %d %v", resp.StatusCode, v)
			}
			if _, v := do(t, "POST", base+"/element", `{"using":"css selector","value":"#no-such-element"}`); v["status"] != 7.0 {
				t.Errorf("a missing element: %v, want JSONWire's status 7 (NoSuchElement)", v)
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
