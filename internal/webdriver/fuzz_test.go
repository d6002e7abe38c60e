package webdriver

import (
	"errors"
	"testing"
)

// FuzzParseNewSession: any body parses or is refused with an ArgumentError;
// nothing panics, and a parsed request's candidates are usable.
func FuzzParseNewSession(f *testing.F) {
	for _, seed := range []string{
		`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"t","sessionTimeout":"2m","env":["LANG=C"]}},"firstMatch":[{},{"browserVersion":"128"}]}}`,
		`{"desiredCapabilities":{"browserName":"chrome","version":"128","sessionTimeout":30,"env":["A=1"],"labels":{"a":"b"}}}`,
		`{"capabilities":{"firstMatch":[{"browserName":7}]}}`,
		`{"capabilities":{"alwaysMatch":{"websummoner:options":{"sessionTimeout":1e300}}}}`,
		`{"capabilities":null,"desiredCapabilities":null}`,
		selenium3Body,
		`[]`, `{`, `{"capabilities":{"firstMatch":[1,2]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := ParseNewSession(body)
		if err == nil {
			var cs []Candidate
			if cs, err = n.Candidates(); err == nil {
				for _, c := range cs {
					_ = DriverBody(c.Caps(), n.W3C, map[string]any{"goog:chromeOptions": map[string]any{"args": []any{"--headless"}}})
					if c.Options.SessionTimeout < 0 {
						t.Fatalf("negative sessionTimeout %v from %q", c.Options.SessionTimeout, body)
					}
				}
			}
		}
		var ae *ArgumentError
		if err != nil && !errors.As(err, &ae) {
			t.Fatalf("%q: %T %v is not an ArgumentError", body, err, err)
		}
	})
}
