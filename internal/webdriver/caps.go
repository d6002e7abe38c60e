package webdriver

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Vendor option keys the hub reads and strips before the body reaches a driver.
const (
	OptionsKey         = "websummoner:options"
	SelenoidOptionsKey = "selenoid:options"
)

// NewSession is a parsed new-session request body, W3C or JSONWire.
type NewSession struct {
	// W3C is true when the body has "capabilities"; a body with only
	// "desiredCapabilities" is JSONWire and gets a JSONWire-shaped answer.
	W3C         bool
	AlwaysMatch map[string]any
	FirstMatch  []map[string]any
	Desired     map[string]any
}

// ArgumentError is a client mistake in a request body (W3C "invalid argument").
type ArgumentError struct{ Msg string }

func (e *ArgumentError) Error() string { return e.Msg }

func argErr(format string, a ...any) error { return &ArgumentError{Msg: fmt.Sprintf(format, a...)} }

// ParseNewSession decodes a new-session body. Errors are *ArgumentError.
func ParseNewSession(body []byte) (*NewSession, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, argErr("new session request body is not a JSON object: %v", err)
	}
	n := &NewSession{}
	if raw, ok := top["capabilities"]; ok && string(raw) != "null" {
		n.W3C = true
		var c struct {
			AlwaysMatch map[string]any   `json:"alwaysMatch"`
			FirstMatch  []map[string]any `json:"firstMatch"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, argErr("\"capabilities\" must be an object with an object \"alwaysMatch\" and an array of objects \"firstMatch\": %v", err)
		}
		n.AlwaysMatch, n.FirstMatch = c.AlwaysMatch, c.FirstMatch
		if n.AlwaysMatch == nil {
			n.AlwaysMatch = map[string]any{}
		}
		if len(n.FirstMatch) == 0 {
			n.FirstMatch = []map[string]any{{}}
		}
		for i, fm := range n.FirstMatch {
			for k := range fm {
				if _, dup := n.AlwaysMatch[k]; dup {
					return nil, argErr("capability %q is in both \"alwaysMatch\" and \"firstMatch\"[%d]; W3C allows it in one only", k, i)
				}
			}
		}
	}
	if raw, ok := top["desiredCapabilities"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &n.Desired); err != nil {
			return nil, argErr("\"desiredCapabilities\" must be an object: %v", err)
		}
	}
	if !n.W3C && n.Desired == nil {
		return nil, argErr("new session request has neither \"capabilities\" (W3C) nor \"desiredCapabilities\" (JSONWire)")
	}
	return n, nil
}

// Candidate is one set of capabilities the request would accept: alwaysMatch merged
// with one firstMatch entry (W3C), or desiredCapabilities (JSONWire).
type Candidate struct {
	Caps    map[string]any
	Browser string
	Version string
	Options Options
}

// Candidates returns the request's candidates in the order they are to be tried.
func (n *NewSession) Candidates() ([]Candidate, error) {
	var sets []map[string]any
	if n.W3C {
		for _, fm := range n.FirstMatch {
			m := maps.Clone(n.AlwaysMatch)
			maps.Copy(m, fm)
			sets = append(sets, m)
		}
	} else {
		sets = append(sets, n.Desired)
	}
	out := make([]Candidate, 0, len(sets))
	for _, caps := range sets {
		c := Candidate{Caps: caps}
		c.Browser = firstString(caps, "browserName", "deviceName", "appium:deviceName")
		c.Version = firstString(caps, "browserVersion", "version")
		var err error
		if c.Options, err = parseOptions(caps, !n.W3C); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func firstString(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := m[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// Options are the vendor options a client may set, under "websummoner:options"
// or, for drop-in use, "selenoid:options" (and, in JSONWire, at the top level).
type Options struct {
	Name             string            `json:"name,omitempty"`
	SessionTimeout   time.Duration     `json:"-"`
	Env              []string          `json:"env,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	ScreenResolution string            `json:"screenResolution,omitempty"`
	TimeZone         string            `json:"timeZone,omitempty"`
	EnableVNC        bool              `json:"enableVNC,omitempty"`
}

func parseOptions(caps map[string]any, legacyTopLevel bool) (Options, error) {
	var src map[string]any
	key := ""
	for _, k := range []string{OptionsKey, SelenoidOptionsKey} {
		if v, ok := caps[k]; ok {
			m, ok := v.(map[string]any)
			if !ok {
				return Options{}, argErr("%q must be an object", k)
			}
			src, key = m, k
			break
		}
	}
	if src == nil && legacyTopLevel {
		src, key = caps, "desiredCapabilities"
	}
	var o Options
	if src == nil {
		return o, nil
	}
	raw, _ := json.Marshal(src)
	var aux struct {
		Options
		SessionTimeout any `json:"sessionTimeout"`
		Env            any `json:"env"`
		Labels         any `json:"labels"`
	}
	if err := json.Unmarshal(raw, &aux); err != nil {
		return o, argErr("%s: %v", key, err)
	}
	o = aux.Options
	switch t := aux.SessionTimeout.(type) {
	case nil:
	case string:
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return o, argErr("%s.sessionTimeout %q must be a positive duration such as \"90s\" or \"5m\"", key, t)
		}
		o.SessionTimeout = d
	case float64:
		if t <= 0 {
			return o, argErr("%s.sessionTimeout %v must be positive (seconds)", key, t)
		}
		o.SessionTimeout = time.Duration(t * float64(time.Second))
	default:
		return o, argErr("%s.sessionTimeout must be a duration string such as \"5m\"", key)
	}
	if aux.Env != nil {
		list, ok := aux.Env.([]any)
		if !ok {
			return o, argErr("%s.env must be an array of \"NAME=value\" strings", key)
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok || !strings.Contains(s, "=") || strings.HasPrefix(s, "=") {
				return o, argErr("%s.env entry %v must be a \"NAME=value\" string", key, e)
			}
			o.Env = append(o.Env, s)
		}
	}
	if aux.Labels != nil {
		m, ok := aux.Labels.(map[string]any)
		if !ok {
			return o, argErr("%s.labels must be an object of strings", key)
		}
		o.Labels = map[string]string{}
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				return o, argErr("%s.labels[%q] must be a string", key, k)
			}
			o.Labels[k] = s
		}
	}
	return o, nil
}

// w3cKeys are the standard capabilities a W3C driver accepts without a prefix.
var w3cKeys = []string{"browserName", "platformName", "acceptInsecureCerts", "pageLoadStrategy", "proxy",
	"timeouts", "unhandledPromptBehavior", "strictFileInteractability", "setWindowRect", "webSocketUrl",
	"userAgent"}

// DriverBody is the new-session body to send to the driver for a chosen candidate:
// W3C always (JSONWire requests are translated), the hub's vendor options and the
// version (already resolved by the hub, and a driver would compare it to its exact
// build) removed, and defaults from browsers.json merged under the client's values.
func DriverBody(c Candidate, w3c bool, defaults map[string]any) []byte {
	caps := map[string]any{}
	for k, v := range c.Caps {
		switch {
		case k == OptionsKey || k == SelenoidOptionsKey || k == "browserVersion" || k == "version":
		case w3c || strings.Contains(k, ":") || slices.Contains(w3cKeys, k):
			caps[k] = v
		case k == "chromeOptions":
			if _, ok := c.Caps["goog:chromeOptions"]; !ok {
				caps["goog:chromeOptions"] = v
			}
		}
	}
	if !w3c {
		if name, ok := caps["browserName"]; ok && name == "" {
			delete(caps, "browserName")
		}
	}
	caps = Merge(defaults, caps)
	body, _ := json.Marshal(map[string]any{"capabilities": map[string]any{"alwaysMatch": caps, "firstMatch": []any{map[string]any{}}}})
	return body
}

// Merge returns over laid on base: objects merge key by key, arrays are joined
// without repeats (base first), and over's other values win.
func Merge(base, over map[string]any) map[string]any {
	out := maps.Clone(over)
	if out == nil {
		out = map[string]any{}
	}
	for k, bv := range base {
		ov, ok := out[k]
		if !ok {
			out[k] = bv
			continue
		}
		switch b := bv.(type) {
		case map[string]any:
			if o, ok := ov.(map[string]any); ok {
				out[k] = Merge(b, o)
			}
		case []any:
			if o, ok := ov.([]any); ok {
				joined := slices.Clone(b)
				for _, x := range o {
					if !slices.ContainsFunc(joined, func(y any) bool { return fmt.Sprint(x) == fmt.Sprint(y) }) {
						joined = append(joined, x)
					}
				}
				out[k] = joined
			}
		}
	}
	return out
}
