package webdriver

import (
	"encoding/json"
	"errors"
	"fmt"
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
}

// ErrNoSessionID is wrapped by ParseDriverSession when an answer has no session id.
var ErrNoSessionID = errors.New("the answer has no sessionId")

// ParseDriverSession reads a driver's 200 answer to POST /session in either
// shape: W3C {"value":{"sessionId":…,"capabilities":{…}}} or JSONWire
// {"sessionId":…,"status":0,"value":{caps}}.
func ParseDriverSession(data []byte) (DriverSession, error) {
	var out struct {
		SessionID string          `json:"sessionId"`
		Value     json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return DriverSession{}, fmt.Errorf("the answer is not JSON: %w", err)
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

// DriverError is a non-200 answer from a driver to the new-session call.
type DriverError struct {
	// Browser names the browser for messages ("chrome 128.0").
	Browser string
	// Status is the driver's HTTP status.
	Status int
	// Body is what it sent, as sent.
	Body []byte
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("%s: the driver answered %d to the new-session call: %s", e.Browser, e.Status, Truncate(e.Body, 300))
}

// ClientFault reports whether the driver blamed the request (a 4xx): retrying
// the same capabilities elsewhere won't help, and the host is not to blame.
func (e *DriverError) ClientFault() bool { return e.Status >= 400 && e.Status < 500 }

// W3C returns the driver's W3C error code and message when its body is a W3C
// error body.
func (e *DriverError) W3C() (code, message string, ok bool) {
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
