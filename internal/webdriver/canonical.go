package webdriver

import (
	"encoding/json"
	"strings"
)

// CanonicalCaps is a new-session body (as DriverBody makes it) reduced to
// what a driver acts on, so that two bodies that ask for the same session
// compare equal: the capabilities of the protocol spoken (W3C's alwaysMatch
// merged with a single firstMatch, or JSONWire's desiredCapabilities, marked
// as such), without values that mean the default — a capability that is
// null (W3C: absent), an empty vendor options block, empty lists and objects
// inside one, W3C's defaults (pageLoadStrategy "normal", acceptInsecureCerts and
// strictFileInteractability false, unhandledPromptBehavior "dismiss and
// notify", platformName "any") and chromedriver's goog:chromeOptions.w3c true
// — with browserName in lower case. Stock ChromeOptions() of Selenium's
// clients reduce to {"browserName":"chrome"}. What a driver reads otherwise
// stays: a null inside an object (timeouts' "script": null is no script
// timeout), "" and an empty standard capability ("proxy": {}, which a
// driver refuses), so a warm browser is never handed over where a cold
// start would have answered otherwise. A body that does not parse
// gives "", equal to nothing but another such body.
func CanonicalCaps(body []byte) string {
	var req struct {
		Capabilities *struct {
			AlwaysMatch map[string]any   `json:"alwaysMatch"`
			FirstMatch  []map[string]any `json:"firstMatch"`
		} `json:"capabilities"`
		Desired map[string]any `json:"desiredCapabilities"`
	}
	if json.Unmarshal(body, &req) != nil {
		return ""
	}
	prefix := "w3c:"
	caps := map[string]any{}
	switch c := req.Capabilities; {
	case c != nil:
		for k, v := range c.AlwaysMatch {
			caps[k] = v
		}
		if len(c.FirstMatch) > 1 {
			return "" // several alternatives: the driver chooses; never pooled
		}
		for _, fm := range c.FirstMatch {
			for k, v := range fm {
				caps[k] = v
			}
		}
	case req.Desired != nil:
		prefix, caps = "jsonwire:", req.Desired
	default:
		return ""
	}
	for k, def := range map[string]any{"pageLoadStrategy": "normal", "acceptInsecureCerts": false,
		"strictFileInteractability": false, "unhandledPromptBehavior": "dismiss and notify"} {
		if caps[k] == def {
			delete(caps, k)
		}
	}
	if p, ok := caps["platformName"].(string); ok && strings.EqualFold(p, "any") {
		delete(caps, "platformName")
	}
	if n, ok := caps["browserName"].(string); ok {
		caps["browserName"] = strings.ToLower(n)
	}
	if o, ok := caps["goog:chromeOptions"].(map[string]any); ok && o["w3c"] == true {
		delete(o, "w3c")
	}
	for k, v := range caps {
		v = dropEmpty(v)
		if v == nil || strings.Contains(k, ":") && empty(v) {
			delete(caps, k)
			continue
		}
		caps[k] = v
	}
	out, err := json.Marshal(caps)
	if err != nil {
		return ""
	}
	return prefix + string(out)
}

// dropEmpty removes, from every object at any depth, the members that are an
// empty list or object (after their own are removed): an options block's
// "args": [] or "prefs": {} asks for nothing.
func dropEmpty(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range t {
			x = dropEmpty(x)
			if empty(x) {
				continue
			}
			out[k] = x
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = dropEmpty(x)
		}
		return out
	}
	return v
}

func empty(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}
