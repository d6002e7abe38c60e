package webdriver

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseW3C(t *testing.T) {
	n, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"t1","sessionTimeout":"2m","env":["A=1"],"labels":{"team":"qa"},"screenResolution":"1280x1024x24","timeZone":"Europe/Paris"}},
		"firstMatch":[{"browserVersion":"127"},{"browserVersion":"128"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := n.Candidates()
	if err != nil {
		t.Fatal(err)
	}
	if !n.W3C || len(cs) != 2 || cs[0].Version != "127" || cs[1].Version != "128" || cs[1].Browser != "chrome" {
		t.Fatalf("%+v", cs)
	}
	o := cs[0].Options
	if o.Name != "t1" || o.SessionTimeout != 2*time.Minute || o.Env[0] != "A=1" || o.Labels["team"] != "qa" || o.TimeZone != "Europe/Paris" || o.ScreenResolution != "1280x1024x24" {
		t.Fatalf("options %+v", o)
	}
}

func TestParseJSONWireAndDeviceName(t *testing.T) {
	n, err := ParseNewSession([]byte(`{"desiredCapabilities":{"deviceName":"android","version":"9.0","name":"legacy","sessionTimeout":30}}`))
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := n.Candidates()
	if n.W3C || cs[0].Browser != "android" || cs[0].Version != "9.0" || cs[0].Options.Name != "legacy" || cs[0].Options.SessionTimeout != 30*time.Second {
		t.Fatalf("%+v", cs[0])
	}
	n, _ = ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"appium:deviceName":"pixel"}}}`))
	cs, _ = n.Candidates()
	if cs[0].Browser != "pixel" {
		t.Fatalf("%+v", cs[0])
	}
}

func TestOurOptionsWinOverSelenoids(t *testing.T) {
	n, _ := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"x","websummoner:options":{"name":"ours"},"selenoid:options":{"name":"theirs"}}}}`))
	cs, _ := n.Candidates()
	if cs[0].Options.Name != "ours" {
		t.Fatal(cs[0].Options.Name)
	}
}

func TestMalformed(t *testing.T) {
	cases := map[string]string{
		`not json`:                           "not a JSON object",
		`[1]`:                                "not a JSON object",
		`{}`:                                 "neither",
		`{"capabilities":{"firstMatch":{}}}`: "array of objects",
		`{"capabilities":{"alwaysMatch":{"a":1},"firstMatch":[{"a":2}]}}`:                                                                                     `"a" is in both`,
		`{"capabilities":{"alwaysMatch":{"selenoid:options":"x"}}}`:                                                                                           "must be an object",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"sessionTimeout":"x"}}}}`:                                                                        "must be a duration such as",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"env":["NOVALUE"]}}}}`:                                                                           "NAME=value",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"labels":{"a":1}}}}}`:                                                                            "must be a string",
		`{"capabilities":{"alwaysMatch":{"browserName":7}}}`:                                                                                                  `"browserName" must be a string (got a number)`,
		`{"capabilities":{"alwaysMatch":{"browserName":["chrome"]}}}`:                                                                                         `"browserName" must be a string (got an array)`,
		`{"capabilities":{"firstMatch":[{"browserVersion":999}]}}`:                                                                                            `"browserVersion" must be a string (got a number)`,
		`{"desiredCapabilities":{"browserName":"chrome","version":128}}`:                                                                                      `"version" must be a string`,
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"sessionTimeout":1e10}}}}`:                                                                       "sessionTimeout 1e+10 must be a number of seconds",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"sessionTimeout":1e300}}}}`:                                                                      "must be a number of seconds",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"sessionTimeout":"9999999h"}}}}`:                                                                 "must be a duration such as",
		`{"capabilities":{"firstMatch":[` + strings.Repeat(`{},`, MaxFirstMatch) + `{}]}}`:                                                                    "at most 64",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"s3KeyPattern":"a"}}}}`:                                                                          "S3 upload is not supported by this hub yet",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"screenResolution":"big"}}}}`:                                                                    "must be WIDTHxHEIGHT or WIDTHxHEIGHTxDEPTH",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"screenResolution":"1920x1080x32"}}}}`:                                                           "depth 8, 16 or 24",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"screenResolution":"99999x10"}}}}`:                                                               "sides 16 to 8192",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"screenResolution":"+800x600"}}}}`:                                                               "must be WIDTHxHEIGHT",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"videoName":"../x.mp4"}}}}`:                                                                      "must be a file name, without a path",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"videoName":".hidden.mp4"}}}}`:                                                                   "must be a file name, without a path",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"videoScreenSize":"1280x720x24"}}}}`:                                                             "videoScreenSize \"1280x720x24\" must be WIDTHxHEIGHT",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"videoScreenSize":"2000x1000"}}}}`:                                                               "larger than the screen (1920x1080)",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"videoFrameRate":500}}}}`:                                                                        "from 1 to 60",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"videoFrameRate":2.5}}}}`:                                                                        "videoFrameRate",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"videoCodec":"x264; rm -rf /"}}}}`:                                                               "must be one of libx264",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"videoCodec":"rawvideo"}}}}`:                                                                     "an uncompressed one fills the host's disk",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"enableLog":true,"logName":"../x.log"}}}}`:                                                       "must be a file name, without a path",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"hostsEntries":["no-ip"]}}}}`:                                                                    `hostsEntries entry "no-ip" must be "host:ip"`,
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"dnsServers":["dns.example"]}}}}`:                                                                "must be an IP address",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"additionalNetworks":["a b"]}}}}`:                                                                "not a Docker network or container name",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"containerHostname":"a_b"}}}}`:                                                                   "must be a host name",
		`{"capabilities":{"firstMatch":[1]}}`:                                                                                                                 `"firstMatch"[0] must be an object`,
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"env":["A=x\u0000y"]}}}}`:                                                                        "holds a NUL byte",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"hostsEntries":[` + strings.TrimSuffix(strings.Repeat(`"h.test:10.0.0.1",`, 257), ",") + `]}}}}`: "at most 256",
		`{"capabilities":{"alwaysMatch":{"selenoid:options":{"dnsServers":[` + strings.TrimSuffix(strings.Repeat(`"10.0.0.1",`, 17), ",") + `]}}}}`:           "at most 16",
	}
	for body, want := range cases {
		wantArgumentError(t, body, want)
	}
}

// Selenoid's networking options are read; unimplemented ones set false are fine.
func TestNetworkingOptions(t *testing.T) {
	n, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"enableVideo":false,"enableLog":false,
		"hostsEntries":["a.test:10.0.0.1","b.test:::1"],"dnsServers":["1.1.1.1"],"additionalNetworks":["n1"],"applicationContainers":["db"],"containerHostname":"box-1"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := n.Candidates()
	if err != nil {
		t.Fatal(err)
	}
	o := cs[0].Options
	if len(o.HostsEntries) != 2 || o.DNSServers[0] != "1.1.1.1" || o.AdditionalNetworks[0] != "n1" || o.ApplicationContainers[0] != "db" || o.ContainerHostname != "box-1" {
		t.Fatalf("%+v", o)
	}
	if got := strings.Join(o.Networking(), ","); got != "additionalNetworks,applicationContainers,containerHostname,dnsServers,hostsEntries" {
		t.Fatalf("Networking() = %s", got)
	}
	// A JSONWire body's top level is not checked for unknown keys: it holds everything.
	if n, err := ParseNewSession([]byte(`{"desiredCapabilities":{"browserName":"chrome","acceptSslCerts":true,"name":"x"}}`)); err != nil {
		t.Fatal(err)
	} else if _, err := n.Candidates(); err != nil {
		t.Fatal(err)
	}
}

// null counts as absent, as in W3C's merging.
func TestNullCapabilities(t *testing.T) {
	n, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","browserVersion":null}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := n.Candidates()
	if err != nil || cs[0].Browser != "chrome" || cs[0].Version != "" {
		t.Fatalf("%+v %v", cs, err)
	}
}

func TestDriverBodyStripsAndMerges(t *testing.T) {
	n, _ := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","browserVersion":"128","selenoid:options":{"name":"x"},
		"goog:chromeOptions":{"args":["--window-size=800,600","--headless"]}}}}`))
	cs, _ := n.Candidates()
	defaults := map[string]any{"goog:chromeOptions": map[string]any{"args": []any{"--headless", "--no-sandbox"}, "binary": "/usr/bin/chromium"}}
	var got struct {
		Capabilities struct {
			AlwaysMatch map[string]any `json:"alwaysMatch"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(DriverBody(cs[0].Caps(), true, defaults), &got); err != nil {
		t.Fatal(err)
	}
	am := got.Capabilities.AlwaysMatch
	if _, ok := am["selenoid:options"]; ok {
		t.Error("vendor options reached the driver")
	}
	if _, ok := am["browserVersion"]; ok {
		t.Error("browserVersion reached the driver")
	}
	co := am["goog:chromeOptions"].(map[string]any)
	want := []any{"--headless", "--no-sandbox", "--window-size=800,600"}
	if !reflect.DeepEqual(co["args"], want) || co["binary"] != "/usr/bin/chromium" {
		t.Errorf("chromeOptions %v, want args %v and the default binary", co, want)
	}
	// JSONWire stays JSONWire (the driver then answers the session's commands
	// in it): desiredCapabilities only, its keys kept but the version and the
	// vendor options, chromeOptions under the name the defaults use.
	n, _ = ParseNewSession([]byte(`{"desiredCapabilities":{"browserName":"chrome","version":"","platform":"ANY","javascriptEnabled":true,"selenoid:options":{"name":"x"},"chromeOptions":{"args":["--window-size=800,600"]}}}`))
	cs, _ = n.Candidates()
	var legacy map[string]map[string]any
	if err := json.Unmarshal(DriverBody(cs[0].Caps(), false, defaults), &legacy); err != nil {
		t.Fatal(err)
	}
	dc := legacy["desiredCapabilities"]
	if len(legacy) != 1 || dc == nil {
		t.Fatalf("a JSONWire client's body to the driver: %v, want desiredCapabilities alone", legacy)
	}
	for _, k := range []string{"version", "selenoid:options", "chromeOptions"} {
		if _, ok := dc[k]; ok {
			t.Errorf("%s reached the driver: %v", k, dc)
		}
	}
	if dc["platform"] != "ANY" || dc["javascriptEnabled"] != true || dc["browserName"] != "chrome" {
		t.Errorf("the client's JSONWire capabilities were not kept: %v", dc)
	}
	co = dc["goog:chromeOptions"].(map[string]any)
	if want := []any{"--headless", "--no-sandbox", "--window-size=800,600"}; !reflect.DeepEqual(co["args"], want) {
		t.Errorf("JSONWire chromeOptions %v, want args %v", co, want)
	}
}

// A client's value does not take the place of an object or array the
// operator's defaults give: refused, or, for null (no value), the default stays.
func TestCheckDefaults(t *testing.T) {
	defaults := map[string]any{"goog:chromeOptions": map[string]any{"args": []any{"--headless"}, "prefs": map[string]any{"a": 1.0}}, "acceptInsecureCerts": true}
	for _, c := range []struct {
		caps string
		w3c  bool
		err  string
	}{
		{caps: `{"goog:chromeOptions":{"args":["--lang=de"],"prefs":{"b":2}},"acceptInsecureCerts":false}`, w3c: true},
		{caps: `{"goog:chromeOptions":null}`, w3c: true},
		{caps: `{"goog:chromeOptions":{"args":null,"prefs":null}}`, w3c: true},
		{caps: `{"goog:chromeOptions":"binary=/bin/sh"}`, w3c: true, err: "goog:chromeOptions must be a JSON object"},
		{caps: `{"goog:chromeOptions":[]}`, w3c: true, err: "goog:chromeOptions must be a JSON object: browsers.json gives it one for this browser, and an array would remove it"},
		{caps: `{"goog:chromeOptions":{"args":"--kiosk"}}`, w3c: true, err: "goog:chromeOptions.args must be a JSON array"},
		{caps: `{"goog:chromeOptions":{"prefs":[1]}}`, w3c: true, err: "goog:chromeOptions.prefs must be a JSON object"},
		// JSONWire's chromeOptions reaches the driver as goog:chromeOptions.
		{caps: `{"chromeOptions":"x"}`, err: "goog:chromeOptions must be a JSON object"},
	} {
		var caps map[string]any
		if err := json.Unmarshal([]byte(c.caps), &caps); err != nil {
			t.Fatal(err)
		}
		err := CheckDefaults(caps, c.w3c, defaults)
		var ae *ArgumentError
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.caps, err)
		case c.err != "" && (!errors.As(err, &ae) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want an argument error with %q", c.caps, err, c.err)
		}
		if err != nil {
			continue
		}
		var body struct {
			Capabilities struct {
				AlwaysMatch map[string]any `json:"alwaysMatch"`
			} `json:"capabilities"`
		}
		raw := DriverBody(caps, true, defaults)
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		co, _ := body.Capabilities.AlwaysMatch["goog:chromeOptions"].(map[string]any)
		if args, _ := co["args"].([]any); len(args) == 0 || args[0] != "--headless" {
			t.Errorf("%s: the defaults' args are gone from %s", c.caps, raw)
		}
	}
}

// The driver's body is not HTML-escaped: '<' stays one byte.
func TestDriverBodyIsNotHTMLEscaped(t *testing.T) {
	body := DriverBody(map[string]any{"browserName": "chrome", "x": "<a&b>"}, true, nil)
	if !bytes.Contains(body, []byte(`"x":"<a&b>"`)) || bytes.HasSuffix(body, []byte("\n")) {
		t.Fatalf("%s", body)
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, 404, ErrInvalidSessionID, "gone")
	var b ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || rec.Code != 404 || b.Value.Error != "invalid session id" || b.Value.Message != "gone" {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// Selenoid's video options take Selenoid's defaults, from the session's screen.
func TestVideoDefaults(t *testing.T) {
	for body, want := range map[string]Options{
		`{"enableVideo":true}`: {EnableVideo: true, VideoScreenSize: "1920x1080", VideoFrameRate: 12, VideoCodec: "libx264"},
		`{"enableVideo":true,"screenResolution":"1280x1024x16"}`: {EnableVideo: true, ScreenResolution: "1280x1024x16",
			VideoScreenSize: "1280x1024", VideoFrameRate: 12, VideoCodec: "libx264"},
		`{"enableVideo":true,"screenResolution":"1280x1024","videoScreenSize":"640x480","videoFrameRate":25,"videoCodec":"mpeg4","videoName":"run-1.mkv"}`: {
			EnableVideo: true, ScreenResolution: "1280x1024", VideoScreenSize: "640x480", VideoFrameRate: 25, VideoCodec: "mpeg4", VideoName: "run-1.mkv"},
		`{"enableVideo":false,"videoFrameRate":25}`: {VideoFrameRate: 25},
	} {
		n, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":` + body + `}}}`))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		c, err := n.Candidates()
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if got := c[0].Options; !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", body, got, want)
		}
	}
	if s := (Options{ScreenResolution: "1280x1024"}).Screen(); s != "1280x1024x24" {
		t.Errorf("Screen() = %q, want the depth added", s)
	}
}

// Vendor options the hub does not know are ignored, as Selenoid ignores them,
// and named so the hub can log them; those it knows are still read.
func TestUnknownVendorOptionsAreIgnored(t *testing.T) {
	n, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"n","nmae":"typo","moon:extra":{"a":1}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := n.Candidates()
	if err != nil {
		t.Fatalf("unknown vendor options refused: %v", err)
	}
	o := cs[0].Options
	if want := []string{"selenoid:options.moon:extra", "selenoid:options.nmae"}; !reflect.DeepEqual(o.Ignored, want) || o.Name != "n" {
		t.Fatalf("ignored %v, name %q; want %v and the known name read", o.Ignored, o.Name, want)
	}
}

// wantArgumentError checks that body is refused, in parsing or in choosing its
// candidates, with an ArgumentError whose message holds want.
func wantArgumentError(t *testing.T, body, want string) {
	t.Helper()
	n, err := ParseNewSession([]byte(body))
	if err == nil {
		_, err = n.Candidates()
	}
	var ae *ArgumentError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: err = %v, want an ArgumentError containing %q", body, err, want)
	}
}

// What the hub reserves for a parse, ParseCost, covers what parsing
// allocates, whatever the body's shape.
func TestParseCostIsBounded(t *testing.T) {
	// Invalid UTF-8 would decode to three bytes a byte, and then some: refused.
	if _, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"a":"` + strings.Repeat("\xff", 1000) + `"}}}`)); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("invalid UTF-8: %v", err)
	}
	rep := func(item string, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.ReplaceAll(item, "#", strconv.Itoa(i)))
		}
		return b.String()
	}
	const n = 20_000
	for name, body := range map[string]string{
		"empty objects as values": `{"capabilities":{"alwaysMatch":{"a":{` + rep(`"k#":{}`, n) + `}}}}`,
		"empty objects in array":  `{"capabilities":{"alwaysMatch":{"a":[` + rep(`{}`, n) + `]}}}`,
		"nested objects":          `{"capabilities":{"alwaysMatch":{"a":[` + rep(`{"b":{}}`, n) + `]}}}`,
		"empty arrays":            `{"capabilities":{"alwaysMatch":{"a":[` + rep(`[[[]]]`, n) + `]}}}`,
		"numbers":                 `{"capabilities":{"alwaysMatch":{"a":[` + rep(`0`, n) + `]}}}`,
		"empty strings":           `{"capabilities":{"alwaysMatch":{"a":[` + rep(`""`, n) + `]}}}`,
		"one large string":        `{"capabilities":{"alwaysMatch":{"a":"` + strings.Repeat("x", 4<<20) + `"}}}`,
		"escaped string":          `{"capabilities":{"alwaysMatch":{"a":"` + strings.Repeat(`\u00e9`, 1<<20) + `"}}}`,
		"non-ASCII":               `{"capabilities":{"firstMatch":[{"a":"` + strings.Repeat("é€😀", 1<<20) + `"}]}}`,
		"in firstMatch":           `{"capabilities":{"firstMatch":[{"a":"` + strings.Repeat("x", 4<<20) + `","b":[` + rep(`{}`, n) + `]}]}}`,
		"JSONWire":                `{"desiredCapabilities":{"a":[` + rep(`{"b":{}}`, n) + `]}}`,
	} {
		b := []byte(body)
		reserved := ParseCost(b, CountValues(b))
		// The fewest bytes of three runs: the count is the process's, and
		// anything else that allocates meanwhile adds to it.
		allocated := int64(-1)
		for range 3 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			ns, err := ParseNewSession(b)
			if err != nil {
				t.Fatal(err)
			}
			cands, err := ns.Candidates()
			if err != nil {
				t.Fatal(err)
			}
			_ = cands[0].Caps()
			runtime.ReadMemStats(&after)
			if n := int64(after.TotalAlloc - before.TotalAlloc); allocated < 0 || n < allocated {
				allocated = n
			}
		}
		if allocated > reserved {
			t.Errorf("%s: parsing allocated %d bytes, over the %d reserved for it", name, allocated, reserved)
		}
	}
}

// A zero sessionTimeout is the hub's -timeout, as none is (Selenoid takes
// "0s"); a negative one is refused.
func TestZeroSessionTimeoutIsTheDefault(t *testing.T) {
	for _, v := range []string{`"0s"`, `0`} {
		n, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"sessionTimeout":` + v + `}}}}`))
		if err != nil {
			t.Fatalf("sessionTimeout %s: %v", v, err)
		}
		c, err := n.Candidates()
		if err != nil || len(c) != 1 || c[0].Options.SessionTimeout != 0 {
			t.Fatalf("sessionTimeout %s: %v %+v", v, err, c)
		}
	}
	for _, v := range []string{`"-1s"`, `-1`} {
		n, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"sessionTimeout":` + v + `}}}}`))
		if err == nil {
			_, err = n.Candidates()
		}
		if err == nil || !strings.Contains(err.Error(), "sessionTimeout") {
			t.Errorf("sessionTimeout %s: %v, want a refusal naming it", v, err)
		}
	}
}

// A Selenium Grid user's Dynamic Grid capabilities ask what Selenoid's options
// ask: a video, a screen, a zone and a name, per firstMatch candidate; a
// vendor block's own values win over them, and a value of the wrong type is
// refused rather than ignored.
func TestGridCapabilities(t *testing.T) {
	n, err := ParseNewSession([]byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","se:recordVideo":true,"se:timeZone":"Asia/Tokyo","se:name":"grid run"},
		"firstMatch":[{"se:screenResolution":"1280x720"},{"selenoid:options":{"screenResolution":"1024x768","name":"mine"}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cands, err := n.Candidates()
	if err != nil || len(cands) != 2 {
		t.Fatalf("candidates: %v %v", cands, err)
	}
	if o := cands[0].Options; !o.EnableVideo || o.ScreenResolution != "1280x720" || o.TimeZone != "Asia/Tokyo" || o.Name != "grid run" {
		t.Errorf("Grid's capabilities read as %+v", o)
	}
	if o := cands[1].Options; !o.EnableVideo || o.ScreenResolution != "1024x768" || o.Name != "mine" {
		t.Errorf("selenoid:options over Grid's capabilities: %+v", o)
	}
	if o := SessionOptions(map[string]any{"se:timeZone": "Asia/Tokyo"}); o.TimeZone != "Asia/Tokyo" {
		t.Errorf("SessionOptions reads se:timeZone as %q", o.TimeZone)
	}
	for _, body := range []string{
		`{"capabilities":{"alwaysMatch":{"se:recordVideo":"yes"}}}`,
		`{"capabilities":{"alwaysMatch":{"se:screenResolution":1280}}}`,
	} {
		n, err := ParseNewSession([]byte(body))
		if err == nil {
			_, err = n.Candidates()
		}
		var ae *ArgumentError
		if !errors.As(err, &ae) {
			t.Errorf("%s: %v, want an argument error", body, err)
		}
	}
}
