package webdriver

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Real answers to POST /session, as drivers send them.
func TestParseDriverSession(t *testing.T) {
	cases := []struct {
		name, answer string
		id, caps     string // caps: a key the capabilities must hold, or "{}"
		err          string
	}{
		{name: "chromedriver (W3C)",
			answer: `{"value":{"capabilities":{"acceptInsecureCerts":false,"browserName":"chrome","browserVersion":"128.0.6613.137",` +
				`"chrome":{"chromedriverVersion":"128.0.6613.137 (fe621c5aa2d6b987e964fb1b5066833da5fb613d-refs/branch-heads/6613@{#1711})","userDataDir":"/tmp/.org.chromium.Chromium.aBc123"},` +
				`"goog:chromeOptions":{"debuggerAddress":"localhost:38947"},"networkConnectionEnabled":false,"pageLoadStrategy":"normal","platformName":"linux",` +
				`"proxy":{},"setWindowRect":true,"strictFileInteractability":false,"timeouts":{"implicit":0,"pageLoad":300000,"script":30000},` +
				`"unhandledPromptBehavior":"dismiss and notify","webauthn:extension:credBlob":true,"webauthn:virtualAuthenticators":true},` +
				`"sessionId":"3f1c2b0e8d4a5f6e7d8c9b0a1f2e3d4c"}}`,
			id: "3f1c2b0e8d4a5f6e7d8c9b0a1f2e3d4c", caps: "goog:chromeOptions"},
		{name: "geckodriver (W3C)",
			answer: `{"value":{"sessionId":"7a1b9e0c-3d2f-4e5a-8b6c-1d2e3f4a5b6c","capabilities":{"browserName":"firefox","moz:processID":4242}}}`,
			id:     "7a1b9e0c-3d2f-4e5a-8b6c-1d2e3f4a5b6c", caps: "moz:processID"},
		{name: "a JSONWire driver",
			answer: `{"sessionId":"b5e0c1d2","status":0,"value":{"browserName":"android","platform":"ANDROID","version":"9.0"}}`,
			id:     "b5e0c1d2", caps: "platform"},
		{name: "W3C without capabilities", answer: `{"value":{"sessionId":"x1"}}`, id: "x1", caps: "{}"},
		{name: "JSONWire with a null value", answer: `{"sessionId":"x2","status":0,"value":null}`, id: "x2", caps: "{}"},
		{name: "no session id", answer: `{"value":{"capabilities":{}}}`, err: "no sessionId"},
		{name: "not JSON", answer: `<html>502 Bad Gateway</html>`, err: "not JSON"},
	}
	for _, c := range cases {
		ds, err := ParseDriverSession([]byte(c.answer))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			if c.err == "no sessionId" && !errors.Is(err, ErrNoSessionID) {
				t.Errorf("%s: %v is not ErrNoSessionID", c.name, err)
			}
			continue
		}
		if err != nil || ds.ID != c.id {
			t.Errorf("%s: id %q err %v, want %q", c.name, ds.ID, err, c.id)
			continue
		}
		var caps map[string]any
		if err := json.Unmarshal(ds.Caps, &caps); err != nil {
			t.Errorf("%s: caps %s: %v", c.name, ds.Caps, err)
		}
		if _, ok := caps[c.caps]; c.caps != "{}" && !ok || c.caps == "{}" && len(caps) != 0 {
			t.Errorf("%s: caps %s, want %s", c.name, ds.Caps, c.caps)
		}
	}
}

// The client gets its own dialect back, carrying the driver's capabilities.
func TestSessionAnswer(t *testing.T) {
	caps := json.RawMessage(`{"browserName":"chrome"}`)
	w3c, _ := json.Marshal(SessionAnswer(true, "s1", caps))
	if string(w3c) != `{"value":{"capabilities":{"browserName":"chrome"},"sessionId":"s1"}}` {
		t.Errorf("W3C %s", w3c)
	}
	legacy, _ := json.Marshal(SessionAnswer(false, "s1", caps))
	if string(legacy) != `{"sessionId":"s1","status":0,"value":{"browserName":"chrome"}}` {
		t.Errorf("JSONWire %s", legacy)
	}
}

func TestDriverError(t *testing.T) {
	chromedriver := &DriverError{Browser: "chrome 128.0", Status: 500, Body: []byte(`{"value":{"error":"session not created",` +
		`"message":"session not created: This version of ChromeDriver only supports Chrome version 114\nCurrent browser version is 128.0.6613.137",` +
		`"stacktrace":"#0 0x55d1c3e1a0c3 <unknown>\n"}}`)}
	code, msg, ok := chromedriver.W3C()
	if !ok || code != "session not created" || !strings.Contains(msg, "only supports Chrome version 114") || chromedriver.ClientFault() {
		t.Errorf("chromedriver error: %q %q %v", code, msg, ok)
	}
	refused := &DriverError{Browser: "chrome 128.0", Status: 400, Body: []byte(`{"value":{"error":"invalid argument","message":"cannot parse capability: goog:chromeOptions"}}`)}
	if code, _, ok := refused.W3C(); !ok || code != "invalid argument" || !refused.ClientFault() {
		t.Errorf("refusal: %q %v", code, ok)
	}
	// Capabilities that match no browser of the driver's are the client's,
	// though W3C answers them 500 "session not created": a platformName of
	// "windows" must not count as a failed start against the host.
	for _, body := range []string{
		`{"value":{"error":"session not created","message":"session not created: No matching capabilities found","stacktrace":""}}`,
		`{"value":{"error":"session not created","message":"Failed to match capabilities","stacktrace":""}}`,
	} {
		if de := (&DriverError{Status: 500, Body: []byte(body)}); !de.ClientFault() {
			t.Errorf("%s: not the client's fault", body)
		}
	}
	if de := (&DriverError{Status: 500, Body: []byte(`{"value":{"error":"session not created","message":"Unable to find a matching set of capabilities"}}`)}); !de.ClientFault() {
		t.Error("geckodriver's no-match: not the client's fault")
	}
	if de := (&DriverError{Status: 200, JSONWireStatus: 33, Body: []byte(`{"status":33,"value":{"message":"session not created: No matching capabilities found"}}`)}); !de.ClientFault() {
		t.Error("a JSONWire no-match: not the client's fault")
	}
	html := &DriverError{Browser: "chrome 128.0", Status: 502, Body: []byte("<html>" + strings.Repeat("x", 500) + "</html>")}
	if _, _, ok := html.W3C(); ok {
		t.Error("an HTML body read as W3C")
	}
	if e := html.Error(); !strings.HasPrefix(e, "chrome 128.0: the driver answered 502") || !strings.HasSuffix(e, "…") || len(e) > 400 {
		t.Errorf("message %q", e)
	}
}

// A JSONWire driver (chromedriver in legacy mode, a Selenium 3 server) refuses
// a session with HTTP 200 and a non-zero status, often with a sessionId: that
// is a DriverError carrying the driver's message, never a session.
func TestParseDriverSessionJSONWireRefusal(t *testing.T) {
	for answer, want := range map[string]struct {
		status int
		msg    string
	}{
		`{"sessionId":"1b0e5f0c9d8a7b6c5d4e3f2a1b0c9d8e","status":33,"value":{"message":"session not created: This version of ChromeDriver only supports Chrome version 114\nCurrent browser version is 128.0.6613.137 with binary path /usr/bin/chromium\n  (Driver info: chromedriver=114.0.5735.90 (386bc09e8f4f2e025eddae123f36f6263096ae49-refs/branch-heads/5735@{#1052}),platform=Linux 6.1.0 x86_64)"}}`: {
			33, "only supports Chrome version 114"},
		`{"sessionId":null,"status":13,"value":{"message":"unknown error: cannot find Chrome binary","stackTrace":[]}}`: {13, "cannot find Chrome binary"},
		`{"status":33,"value":"no message object"}`: {33, `"status":33`},
	} {
		ds, err := ParseDriverSession([]byte(answer))
		var de *DriverError
		if !errors.As(err, &de) {
			t.Errorf("%s: session %+v, err %v; want a *DriverError", answer, ds, err)
			continue
		}
		if de.JSONWireStatus != want.status || de.Status != 200 || de.ClientFault() {
			t.Errorf("%s: %+v, want JSONWire status %d, HTTP 200, not the client's fault", answer, de, want.status)
		}
		// The hub answers a DriverError whose body is W3C with the driver's HTTP
		// status: this one's 200 must not reach the client as an error's status.
		if _, _, ok := de.W3C(); ok {
			t.Errorf("%s: read as a W3C error body", answer)
		}
		if e := de.Error(); !strings.Contains(e, want.msg) || !strings.Contains(e, "JSONWire status") || strings.HasPrefix(e, ":") {
			t.Errorf("%s: message %q, want the driver's message %q", answer, e, want.msg)
		}
	}
	// A capability the driver cannot parse is the client's fault: not retried,
	// not a failed start that would slow every tenant's starts.
	for _, answer := range []string{
		`{"status":13,"value":{"message":"unknown error: cannot parse capability: goog:chromeOptions"}}`,
		`{"status":61,"value":{"message":"bad"}}`,
		`{"status":13,"value":{"message":"invalid argument: entry 0 of 'firstMatch' is invalid"}}`,
	} {
		var de *DriverError
		if _, err := ParseDriverSession([]byte(answer)); !errors.As(err, &de) || !de.ClientFault() {
			t.Errorf("%s: %v, want the client's fault", answer, err)
		}
	}
	// Status 0 (or none, or not a number) is a success, as before.
	for _, answer := range []string{`{"sessionId":"s0","status":0,"value":{}}`, `{"sessionId":"s1","status":null,"value":{}}`, `{"sessionId":"s2","status":"0","value":{}}`} {
		if ds, err := ParseDriverSession([]byte(answer)); err != nil || ds.ID == "" {
			t.Errorf("%s: %+v %v, want a session", answer, ds, err)
		}
	}
}
