package webdriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// MaxNewSessionAnswer is the largest new-session answer read from a driver. A
// real one is a few kilobytes of capabilities; 16 MiB bounds a broken one.
const MaxNewSessionAnswer = 16 << 20

// DriverSession is a driver's answer to a successful new-session call.
type DriverSession struct {
	// ID is the driver's session id.
	ID string
	// Caps are the capabilities the driver reports, as it sent them; an empty
	// object when it sent none.
	Caps json.RawMessage
	// Path, when not "", is the base path the driver created the session on,
	// in place of its instance's: "/wd/hub" for a driver found there because
	// its browsers.json entry names no path (Selenoid's retry).
	Path string
}

// ErrNoSessionID is wrapped by ParseDriverSession when an answer has no session id.
var ErrNoSessionID = errors.New("the answer has no sessionId")

// ParseDriverSession reads a driver's 200 answer to POST /session in either
// shape: W3C {"value":{"sessionId":…,"capabilities":{…}}} or JSONWire
// {"sessionId":…,"status":0,"value":{caps}}. A JSONWire answer with a non-zero
// status is the driver's refusal, sent with 200 by chromedriver in legacy mode
// and Selenium 3 servers, often with a sessionId: it is a *DriverError, so no
// session is made of it.
func ParseDriverSession(data []byte) (DriverSession, error) {
	var out struct {
		SessionID string          `json:"sessionId"`
		Status    json.RawMessage `json:"status"` // raw: a status that is no number must not fail the rest
		Value     json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return DriverSession{}, fmt.Errorf("the answer is not JSON: %w", err)
	}
	if status := jsonWireStatus(out.Status); status != 0 {
		return DriverSession{}, &DriverError{Status: http.StatusOK, JSONWireStatus: status, Body: data}
	}
	var w3c struct {
		SessionID    string          `json:"sessionId"`
		Capabilities json.RawMessage `json:"capabilities"`
	}
	_ = json.Unmarshal(out.Value, &w3c) // a JSONWire value may be anything
	ds := DriverSession{ID: w3c.SessionID, Caps: w3c.Capabilities}
	if ds.ID == "" {
		ds = DriverSession{ID: out.SessionID, Caps: out.Value}
	}
	if ds.ID == "" {
		return DriverSession{}, fmt.Errorf("%w: %s", ErrNoSessionID, Truncate(data, 200))
	}
	if len(ds.Caps) == 0 || string(ds.Caps) == "null" {
		ds.Caps = json.RawMessage(`{}`)
	}
	return ds, nil
}

// jsonWireUnknownError is JSONWire's catch-all status, "unknown error".
const jsonWireUnknownError = 13

// jsonWireStatus is a JSONWire answer's status: 0 when it is absent, null, 0 or
// not a number. A number that is not a small whole one is still a refusal, as
// JSONWire's "unknown error".
func jsonWireStatus(raw json.RawMessage) int {
	var f float64
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil || f == 0 {
		return 0
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<16 {
		return jsonWireUnknownError
	}
	return int(f)
}

// SessionAnswer is the hub's answer to a created session, in the client's
// dialect: a W3C client gets only value.sessionId (ggr rewrites the top-level
// one when both are present); a JSONWire client gets the top-level sessionId and
// status 0.
func SessionAnswer(w3c bool, id string, caps json.RawMessage) any {
	if w3c {
		return map[string]any{"value": map[string]any{"sessionId": id, "capabilities": caps}}
	}
	return map[string]any{"sessionId": id, "status": 0, "value": caps}
}

// DriverError is a driver's refusal of the new-session call: a non-200 answer,
// or a 200 JSONWire answer with a non-zero status.
type DriverError struct {
	// Browser names the browser for messages ("chrome 128.0"); empty when the
	// caller does not know it.
	Browser string
	// Status is the driver's HTTP status: 200 for a JSONWire refusal.
	Status int
	// JSONWireStatus is a JSONWire refusal's status (33 "session not created",
	// 13 "unknown error", …); 0 for a non-200 answer.
	JSONWireStatus int
	// Body is what it sent, as sent.
	Body []byte
}

// maxDriverMessage bounds the driver's message quoted in a JSONWire refusal's
// error: its text and the driver's version line, not a 16 MiB answer.
const maxDriverMessage = 1000

func (e *DriverError) Error() string {
	prefix := ""
	if e.Browser != "" {
		prefix = e.Browser + ": "
	}
	if e.JSONWireStatus != 0 {
		msg := Truncate([]byte(e.jsonWireMessage()), maxDriverMessage)
		if msg == "" {
			msg = Truncate(e.Body, 300)
		}
		return fmt.Sprintf("%sthe driver refused the new session with JSONWire status %d: %s", prefix, e.JSONWireStatus, msg)
	}
	return fmt.Sprintf("%sthe driver answered %d to the new-session call: %s", prefix, e.Status, Truncate(e.Body, 300))
}

// ClientFault reports whether the driver blamed the request (a 4xx, or
// capabilities that match none of its browsers): retrying the same
// capabilities elsewhere won't help, and the host is not to blame.
func (e *DriverError) ClientFault() bool {
	msg := strings.ToLower(e.jsonWireMessage())
	if noMatch(msg) {
		return true
	}
	if e.JSONWireStatus != 0 {
		// JSONWire has no client-error class: chromedriver in legacy mode
		// answers a capability it cannot parse with 13 "unknown error", and
		// only its message tells it from a browser that failed to start.
		return e.JSONWireStatus == jsonWireInvalidArgument || strings.Contains(msg, "invalid argument") || strings.Contains(msg, "cannot parse")
	}
	return e.Status >= 400 && e.Status < 500
}

// noMatch reports whether a driver's (lower-cased) message says that no
// browser of its matches the capabilities. W3C answers that "session not
// created", a 500 like a browser that failed to start, so only the words
// tell them apart: chromedriver's, WebKitWebDriver's and geckodriver's.
// geckodriver says the same when its Firefox is missing; a host that
// lacks its browser fails every such session at once, where a client's
// platformName of "windows" must not slow every tenant's starts.
func noMatch(msg string) bool {
	for _, s := range []string{"no matching capabilities", "failed to match capabilities", "matching set of capabilities"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// jsonWireInvalidArgument is JSONWire's status 61, "invalid argument".
const jsonWireInvalidArgument = 61

// jsonWireMessage is a JSONWire refusal's value.message ("" when its value
// is no object).
func (e *DriverError) jsonWireMessage() string {
	var body struct {
		Value struct {
			Message string `json:"message"`
		} `json:"value"`
	}
	_ = json.Unmarshal(e.Body, &body)
	return body.Value.Message
}

// W3C returns the driver's W3C error code and message when its body is a W3C
// error body. A JSONWire refusal has none (ok is false): its HTTP status, 200,
// must never become the status of the hub's error answer, which is then
// "session not created" with Error's message.
func (e *DriverError) W3C() (code, message string, ok bool) {
	if e.JSONWireStatus != 0 {
		return "", "", false
	}
	var body ErrorBody
	if json.Unmarshal(e.Body, &body) != nil || body.Value.Error == "" {
		return "", "", false
	}
	return body.Value.Error, body.Value.Message, true
}

// Truncate returns b as text, cut to n bytes with an ellipsis.
func Truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
