package webdriver

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// selenium3Body is what Python's Selenium 3.141 sends for a Remote Chrome with
// Selenoid's options set as desired capabilities: the options at the top level
// of desiredCapabilities, and a W3C half the client stripped them from (keys
// without ':' that are not W3C's).
const selenium3Body = `{"capabilities":{"firstMatch":[{}],"alwaysMatch":{"browserName":"chrome","platformName":"any",
	"goog:chromeOptions":{"extensions":[],"args":["--lang=de"]}}},
 "desiredCapabilities":{"browserName":"chrome","version":"","platform":"ANY","goog:chromeOptions":{"extensions":[],"args":["--lang=de"]},
	"enableVNC":true,"enableVideo":true,"enableLog":true,"name":"checkout","screenResolution":"1280x1024x24","sessionTimeout":"5m",
	"videoName":"checkout.mp4","logName":"checkout.log","env":["LANG=de_DE.UTF-8"],"labels":{"team":"qa"},"timeZone":"Europe/Berlin"}}`

// A Selenium 3 client's options are honoured though it also sent a W3C half,
// as Selenoid honours them; the body forwarded to the driver is the W3C half,
// unchanged.
func TestSelenium3BothHalvesKeepLegacyOptions(t *testing.T) {
	n, err := ParseNewSession([]byte(selenium3Body))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := n.Candidates()
	if err != nil {
		t.Fatal(err)
	}
	if !n.W3C || len(cs) != 1 || cs[0].Browser != "chrome" {
		t.Fatalf("W3C %v, candidates %+v", n.W3C, cs)
	}
	want := Options{Name: "checkout", SessionTimeout: 5 * time.Minute, Env: []string{"LANG=de_DE.UTF-8"}, Labels: map[string]string{"team": "qa"},
		ScreenResolution: "1280x1024x24", TimeZone: "Europe/Berlin", EnableVNC: true, EnableLog: true, LogName: "checkout.log",
		EnableVideo: true, VideoName: "checkout.mp4", VideoScreenSize: "1280x1024", VideoFrameRate: 12, VideoCodec: "libx264"}
	if got := cs[0].Options; !reflect.DeepEqual(got, want) {
		t.Fatalf("options of desiredCapabilities beside capabilities:\n got %+v\nwant %+v", got, want)
	}
	var body struct {
		Capabilities struct {
			AlwaysMatch map[string]any `json:"alwaysMatch"`
		} `json:"capabilities"`
		Desired map[string]any `json:"desiredCapabilities"`
	}
	if err := json.Unmarshal(DriverBody(cs[0].Caps(), n.W3C, nil), &body); err != nil {
		t.Fatal(err)
	}
	if am := body.Capabilities.AlwaysMatch; len(am) != 3 || am["browserName"] != "chrome" || am["platformName"] != "any" || body.Desired != nil {
		t.Errorf("the driver's body changed: %+v", body)
	}
}

// Options in desiredCapabilities merge as Selenoid merges them (mergo with
// override): a vendor block wins over the top-level keys, key by key; a value
// that is zero (false, "", []) sets nothing; labels merge by key. In a W3C
// request, desiredCapabilities' block wins over the W3C half's, which fills in
// what it leaves unset.
func TestLegacyOptionsMerge(t *testing.T) {
	cases := []struct {
		name, body string
		want       Options
	}{
		{name: "JSONWire: the block wins over the top level",
			body: `{"desiredCapabilities":{"browserName":"chrome","name":"top","enableVNC":true,"sessionTimeout":30,"labels":{"a":"1","b":"1"},
				"selenoid:options":{"name":"block","enableVNC":false,"sessionTimeout":"1m","labels":{"b":"2"},"timeZone":""}}}`,
			want: Options{Name: "block", EnableVNC: true, SessionTimeout: time.Minute, Labels: map[string]string{"a": "1", "b": "2"}}},
		{name: "JSONWire: our block, the top level under it",
			body: `{"desiredCapabilities":{"browserName":"chrome","enableVNC":true,"websummoner:options":{"name":"ours"}}}`,
			want: Options{Name: "ours", EnableVNC: true}},
		{name: "W3C: desiredCapabilities' block over the W3C half's over the top level",
			body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"w3c","timeZone":"Europe/Paris","enableLog":true}}},
				"desiredCapabilities":{"browserName":"chrome","enableVNC":true,"name":"top","selenoid:options":{"name":"desired"}}}`,
			want: Options{Name: "desired", TimeZone: "Europe/Paris", EnableLog: true, EnableVNC: true}},
		{name: "W3C: desiredCapabilities that names no browser is not read, as Selenoid",
			body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}},"desiredCapabilities":{"enableVNC":true,"name":"x"}}`,
			want: Options{}},
		{name: "W3C: a deviceName names a browser too",
			body: `{"capabilities":{"alwaysMatch":{"appium:deviceName":"pixel"}},"desiredCapabilities":{"deviceName":"pixel","enableVNC":true}}`,
			want: Options{EnableVNC: true}},
		{name: "an unknown key in both halves' blocks is named once",
			body: `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"nmae":"x"}}},
				"desiredCapabilities":{"browserName":"chrome","selenoid:options":{"nmae":"x"}}}`,
			want: Options{Ignored: []string{"selenoid:options.nmae"}}},
	}
	for _, c := range cases {
		_, cs := candidatesOf(t, c.name, c.body)
		if got := cs[0].Options; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// desiredCapabilities' options, now read beside capabilities, are checked as
// a JSONWire request's are; checks that span blocks see the merged options.
func TestLegacyOptionsChecked(t *testing.T) {
	for body, want := range map[string]string{
		`{"capabilities":{"alwaysMatch":{"browserName":"chrome"}},"desiredCapabilities":{"browserName":"chrome","sessionTimeout":"soon"}}`:                     "desiredCapabilities.sessionTimeout \"soon\" must be a duration such as",
		`{"capabilities":{"alwaysMatch":{"browserName":"chrome"}},"desiredCapabilities":{"browserName":"chrome","labels":"qa"}}`:                               "desiredCapabilities.labels must be an object",
		`{"capabilities":{"alwaysMatch":{"browserName":"chrome"}},"desiredCapabilities":{"browserName":"chrome","selenoid:options":7}}`:                        `"selenoid:options" must be an object`,
		`{"desiredCapabilities":{"browserName":"chrome","env":"A=1","selenoid:options":{"name":"x"}}}`:                                                         "desiredCapabilities.env must be an array",
		`{"desiredCapabilities":{"browserName":"chrome","screenResolution":"1280x720","selenoid:options":{"enableVideo":true,"videoScreenSize":"1920x1080"}}}`: "selenoid:options.videoScreenSize 1920x1080 is larger than the screen (1280x720)",
	} {
		wantArgumentError(t, body, want)
	}
}

// A W3C request whose capabilities name no browser takes the browser and its
// version from desiredCapabilities, as Selenoid does: older Selenium 3 clients
// send "capabilities":{} or an empty alwaysMatch beside desiredCapabilities.
// Where both halves name a browser, the W3C half's stands.
func TestDesiredCapabilitiesNameTheBrowser(t *testing.T) {
	cases := []struct {
		name, body       string
		browser, version string
	}{
		{"empty alwaysMatch, legacy version", `{"capabilities":{"alwaysMatch":{}},"desiredCapabilities":{"browserName":"chrome","version":"128"}}`, "chrome", "128"},
		{"empty capabilities, browserVersion", `{"capabilities":{},"desiredCapabilities":{"browserName":"chrome","browserVersion":"127"}}`, "chrome", "127"},
		{"browserVersion before version", `{"capabilities":{},"desiredCapabilities":{"browserName":"chrome","browserVersion":"127","version":"128"}}`, "chrome", "127"},
		{"an empty browserVersion is none", `{"capabilities":{},"desiredCapabilities":{"browserName":"chrome","browserVersion":"","version":"128"}}`, "chrome", "128"},
		{"a deviceName", `{"capabilities":{"firstMatch":[{}]},"desiredCapabilities":{"deviceName":"android","version":"9.0"}}`, "android", "9.0"},
		{"no version anywhere", `{"capabilities":{"alwaysMatch":{}},"desiredCapabilities":{"browserName":"chrome"}}`, "chrome", ""},
		{"the W3C half's version, desired's none", `{"capabilities":{"alwaysMatch":{"browserVersion":"126"}},"desiredCapabilities":{"browserName":"chrome"}}`, "chrome", "126"},
		{"desired's version over the W3C half's", `{"capabilities":{"alwaysMatch":{"browserVersion":"126"}},"desiredCapabilities":{"browserName":"chrome","version":"128"}}`, "chrome", "128"},
		{"the same browser without a version", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}},"desiredCapabilities":{"browserName":"chrome","version":"128"}}`, "chrome", "128"},
		{"the W3C half's version stands", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","browserVersion":"127"}},"desiredCapabilities":{"browserName":"chrome","version":"128"}}`, "chrome", "127"},
		{"the W3C half's browser stands", `{"capabilities":{"alwaysMatch":{"browserName":"firefox"}},"desiredCapabilities":{"browserName":"chrome","version":"128"}}`, "firefox", ""},
		{"desiredCapabilities naming none", `{"capabilities":{"alwaysMatch":{}},"desiredCapabilities":{"version":"128"}}`, "", ""},
	}
	for _, c := range cases {
		n, cs := candidatesOf(t, c.name, c.body)
		if !n.W3C || cs[0].Browser != c.browser || cs[0].Version != c.version {
			t.Errorf("%s: W3C %v, browser %q version %q; want %q %q", c.name, n.W3C, cs[0].Browser, cs[0].Version, c.browser, c.version)
		}
	}
	// Each firstMatch entry that names no browser gets desiredCapabilities'.
	n, err := ParseNewSession([]byte(`{"capabilities":{"firstMatch":[{"browserName":"firefox"},{"platformName":"linux"}]},"desiredCapabilities":{"browserName":"chrome","version":"128"}}`))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := n.Candidates()
	if err != nil || len(cs) != 2 || cs[0].Browser != "firefox" || cs[0].Version != "" || cs[1].Browser != "chrome" || cs[1].Version != "128" {
		t.Fatalf("candidates %+v, %v; want firefox, then chrome 128", cs, err)
	}
	// desiredCapabilities' version is a string, as Selenoid decodes it.
	wantArgumentError(t, `{"capabilities":{},"desiredCapabilities":{"browserName":"chrome","version":128}}`, `desiredCapabilities.version must be a string (got a number)`)
}

// candidatesOf parses a new-session body named name into its candidates.
func candidatesOf(t *testing.T, name, body string) (*NewSession, []Candidate) {
	t.Helper()
	n, err := ParseNewSession([]byte(body))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cs, err := n.Candidates()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n, cs
}
