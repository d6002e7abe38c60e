package webdriver

import "testing"

func TestCanonicalCaps(t *testing.T) {
	defaults := map[string]any{"goog:chromeOptions": map[string]any{"args": []any{"--headless", "--no-sandbox"}}}
	pooled := CanonicalCaps(DriverBody(map[string]any{"browserName": "chrome"}, true, defaults))
	if pooled == "" {
		t.Fatal("a pooled browser's body has no canonical form")
	}
	// What Selenium's clients send for stock ChromeOptions(), as their
	// new-session bodies reach the hub; each must compare equal to the
	// pooled browser's.
	stock := map[string]map[string]any{
		"python": {"browserName": "chrome", "pageLoadStrategy": "normal", "goog:chromeOptions": map[string]any{"extensions": []any{}, "args": []any{}}},
		"java":   {"browserName": "chrome", "goog:chromeOptions": map[string]any{"args": []any{}, "extensions": []any{}}},
		"go":     {"browserName": "chrome", "platformName": nil, "goog:chromeOptions": map[string]any{"w3c": true}},
		"ruby":   {"browserName": "Chrome", "goog:chromeOptions": map[string]any{}},
		"named":  {"browserName": "chrome", SelenoidOptionsKey: map[string]any{"name": "a test"}},
	}
	for client, caps := range stock {
		if got := CanonicalCaps(DriverBody(caps, true, defaults)); got != pooled {
			t.Errorf("%s: %s, want %s", client, got, pooled)
		}
	}
	for what, caps := range map[string]map[string]any{
		"an argument":     {"browserName": "chrome", "goog:chromeOptions": map[string]any{"args": []any{"--lang=de"}}},
		"eager":           {"browserName": "chrome", "pageLoadStrategy": "eager"},
		"insecure certs":  {"browserName": "chrome", "acceptInsecureCerts": true},
		"BiDi":            {"browserName": "chrome", "webSocketUrl": true},
		"w3c off":         {"browserName": "chrome", "goog:chromeOptions": map[string]any{"w3c": false}},
		"a proxy":         {"browserName": "chrome", "proxy": map[string]any{"proxyType": "manual", "httpProxy": "p:1"}},
		"another browser": {"browserName": "chromium"},
		// What a driver reads otherwise than the default: handed a ready
		// browser, each would be answered otherwise than a cold start.
		"no script timeout":      {"browserName": "chrome", "timeouts": map[string]any{"script": nil}},
		"an empty proxy":         {"browserName": "chrome", "proxy": map[string]any{}},
		"an empty platform name": {"browserName": "chrome", "platformName": ""},
	} {
		if got := CanonicalCaps(DriverBody(caps, true, defaults)); got == pooled {
			t.Errorf("%s compares equal to the pooled browser's: %s", what, got)
		}
	}
	if got := CanonicalCaps(DriverBody(map[string]any{"browserName": "chrome"}, false, defaults)); got == pooled {
		t.Error("a JSONWire session compares equal to a W3C one")
	}
	several := []byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome"},"firstMatch":[{},{"pageLoadStrategy":"eager"}]}}`)
	if CanonicalCaps(several) != "" || CanonicalCaps([]byte("{")) != "" {
		t.Error("several alternatives, or a broken body, have a canonical form")
	}
}
