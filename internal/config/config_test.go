package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const selenoidFile = `{
  "firefox": {"default": "57.0", "versions": {
    "57.0": {"image": "selenoid/vnc:firefox_57.0", "port": "4444", "path": "/wd/hub", "tmpfs": {"/tmp": "size=512m"},
             "env": ["LANG=ru_RU.UTF-8"], "hosts": ["example.com:192.0.2.1"], "shmSize": 268435456,
             "labels": {"team": "qa"}, "sysctl": {"net.ipv4.tcp_timestamps": "1"}, "mem": "1g", "cpu": "1.0",
             "volumes": ["/from:/to:ro"], "publishAllPorts": true}}},
  "chrome": {"default": "128.0", "versions": {
    "9.0": {"image": ["/usr/bin/chromedriver"]},
    "127.0": {"image": ["/usr/bin/chromedriver"]},
    "128.0": {"image": ["/usr/bin/chromedriver", "--verbose"], "path": "/"},
    "128.1": {"image": ["/usr/bin/chromedriver"]}}}
}`

func TestParseSelenoidFile(t *testing.T) {
	bs, err := Parse([]byte(selenoidFile), true)
	if err != nil {
		t.Fatal(err)
	}
	ff := bs["firefox"].Versions["57.0"]
	if ff.Image.Name != "selenoid/vnc:firefox_57.0" || ff.Image.IsCommand() || ff.ShmSize != 268435456 || ff.Tmpfs["/tmp"] != "size=512m" || !ff.PublishAllPorts || ff.Labels["team"] != "qa" {
		t.Fatalf("firefox: %+v", ff)
	}
	if c := bs["chrome"].Versions["128.0"].Image.Command; len(c) != 2 || c[1] != "--verbose" {
		t.Fatalf("chrome command %v", c)
	}
}

func TestFind(t *testing.T) {
	bs, err := Parse([]byte(selenoidFile), true)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, version, want, err string }{
		{"chrome", "", "128.0", ""},
		{"chrome", "127.0", "127.0", ""},
		{"chrome", "128", "128.1", ""}, // prefix: the highest match
		{"chrome", "9", "9.0", ""},
		{"chrome", "12", "128.1", ""},
		{"chrome", "stable", "128.0", ""}, // Selenium Grid's any version: the default
		{"chrome", "130", "", `browser "chrome" version "130" is not configured; configured versions: 9.0, 127.0, 128.0, 128.1`},
		{"opera", "", "", `browser "opera" is not configured; configured: chrome (9.0, 127.0, 128.0, 128.1); firefox (57.0)`},
	}
	for _, c := range cases {
		got, err := bs.Find(c.name, c.version)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("Find(%q,%q) err = %v, want %q", c.name, c.version, err, c.err)
			}
			continue
		}
		if err != nil || got.Version != c.want {
			t.Errorf("Find(%q,%q) = %q, %v; want %q", c.name, c.version, got.Version, err, c.want)
		}
	}
}

func TestValidationNamesBrowserVersionField(t *testing.T) {
	cases := []struct{ doc, want string }{
		{`{"chrome": {"versions": {}}}`, `browser "chrome": "versions" is empty`},
		{`{"chrome": {"versions": {"1": {"port": "4444"}}}}`, `browser "chrome" version "1": "image" is missing`},
		{`{"chrome": {"versions": {"1": {"image": 5}}}}`, `must be a Docker image name (a string) or a command line`},
		{`{"chrome": {"versions": {"1": {"image": "x", "port": "http"}}}}`, `browser "chrome" version "1": "port" "http" must be a number`},
		{`{"chrome": {"versions": {"1": {"image": "x", "path": "wd/hub"}}}}`, `browser "chrome" version "1": "path" "wd/hub" must start with /`},
		{`{"chrome": {"versions": {"1": {"image": "x", "env": ["=x"]}}}}`, `browser "chrome" version "1": "env" entry "=x" has no variable name`},
		{`{"chrome": {"versions": {"1": {"image": "x", "mem": "lots"}}}}`, `browser "chrome" version "1": "mem": "lots" is not a memory size`},
		{`{"chrome": {"versions": {"1": {"image": "x", "mem": "1e30g"}}}}`, `browser "chrome" version "1": "mem": "1e30g" is not a memory size`},
		{`{"chrome": {"versions": {"1": {"image": "x", "cpu": "-1"}}}}`, `browser "chrome" version "1": "cpu": "-1" is not a CPU count`},
		{`{"chrome": {"versions": {"1": {"image": "x", "cpu": "two"}}}}`, `browser "chrome" version "1": "cpu": "two" is not a CPU count`},
		{`{"chrome": {"versions": {"1": {"image": "x", "display": true}}}}`, `browser "chrome" version "1": "display" gives a local driver command a virtual screen`},
		{`{"chrome": {"versions": {"1": {"image": ["x"], "warm": -1}}}}`, `browser "chrome" version "1": "warm" must be a count`},
		{"{\n\"chrome\": {,}}", "line 2:"},
		{`{}`, "no browsers configured"},
		{`{"chrome": {"versions": {"1": {"image": "x"}}}} {"more": 1}`, "unexpected content after the top-level object"},
		{`{"chrome": {"versions": {"1": {"image": "x"}}}} garbage`, "unexpected content after the top-level object"},
		{`{"": {"versions": {"1": {"image": "x"}}}}`, "a browser name is empty"},
		{`{"chrome": null}`, `browser "chrome": entry is null`},
		{`{"chrome": {"versions": {"1": null}}}`, `browser "chrome" version "1": entry is null; give at least {"image": …}`},
		{`{"chrome": {"versions": {"": {"image": "x"}}}}`, `browser "chrome": a version name is empty`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc), true)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.doc, err, c.want)
		}
	}
}

// A reload with a bad file keeps the old configuration; a good one replaces it.
func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "browsers.json")
	os.WriteFile(path, []byte(`{"chrome": {"default": "1", "versions": {"1": {"image": ["a"]}}}}`), 0o644)
	s, err := Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte(`{"chrome": `), 0o644)
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad reload: %v", err)
	}
	if _, err := s.Browsers().Find("chrome", "1"); err != nil {
		t.Fatal("old configuration lost")
	}
	os.WriteFile(path, []byte(`{"firefox": {"default": "2", "versions": {"2": {"image": ["b"]}}}}`), 0o644)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if names := s.Browsers().Names(); len(names) != 1 || names[0] != "firefox" {
		t.Fatalf("after reload: %v", names)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json"), false); err == nil || !strings.Contains(err.Error(), "-conf") {
		t.Fatalf("missing file: %v", err)
	}
}

// Sizes and CPU counts mean what they mean to Selenoid: Docker's RAMInBytes
// (binary units, optional b or ib, any case) and a float; 0 is no limit.
func TestParseMemAndCPUAsSelenoid(t *testing.T) {
	for s, want := range map[string]int64{
		"": 0, "0": 0, "100": 100, "512k": 512 << 10, "512m": 512 << 20, "512MB": 512 << 20, "1g": 1 << 30,
		"1gb": 1 << 30, "1GiB": 1 << 30, "1.5g": 3 << 29, "2t": 2 << 40, "1 g": 1 << 30, "1p": 1 << 50,
	} {
		if got, err := ParseMem(s); err != nil || got != want {
			t.Errorf("ParseMem(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"lots", "-1g", "1x", "1gbb", "g", "1e30g", "NaN"} {
		if got, err := ParseMem(s); err == nil || !strings.Contains(err.Error(), "not a memory size") {
			t.Errorf("ParseMem(%q) = %d, %v; want refused", s, got, err)
		}
	}
	for s, want := range map[string]int64{"": 0, "0": 0, "0.5": 5e8, "2": 2e9, "1.0": 1e9} {
		if got, err := ParseCPU(s); err != nil || got != want {
			t.Errorf("ParseCPU(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"-1", "two", "NaN", "Inf", "1e300"} {
		if got, err := ParseCPU(s); err == nil || !strings.Contains(err.Error(), "not a CPU count") {
			t.Errorf("ParseCPU(%q) = %d, %v; want refused", s, got, err)
		}
	}
}

// What Selenoid loads and the hub can run around loads, with a warning for
// the operator: Docker image entries under -disable-docker (their requests
// are "not available"), a "default" that names no version, a negative
// "shmSize". A "default" that names a version by prefix is resolved, as
// Selenoid resolves it; "NAME" alone in "env" is Docker's unset.
func TestParseWarnsOfWhatSelenoidLoads(t *testing.T) {
	const mixed = `{
  "chrome": {"default": "128", "versions": {
    "local": {"image": ["chromedriver"], "env": ["UNSET_ME"]},
    "127.0": {"image": "selenoid/chrome:127.0", "mem": "lots"},
    "128.0": {"image": "selenoid/chrome:128.0", "shmSize": -1}}},
  "firefox": {"default": "130.0", "versions": {"57.0": {"image": ["geckodriver"]}}}
}`
	bs, warnings, err := ParseWithWarnings([]byte(mixed), false)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(warnings, "\n")
	for _, want := range []string{
		`browser "chrome": versions 127.0, 128.0 are Docker images, which this hub does not run (-disable-docker)`,
		`browser "chrome" version "128.0": "shmSize" -1 is negative`,
		`browser "firefox": "default" is "130.0", which matches none of its versions (57.0)`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings %q do not say %q", warnings, want)
		}
	}
	if len(warnings) != 3 {
		t.Errorf("%d warnings, want 3: %q", len(warnings), warnings)
	}
	if r, err := bs.Find("chrome", ""); err != nil || r.Version != "128.0" || bs["chrome"].Default != "128.0" {
		t.Errorf("default \"128\" resolved to %q (default %q), %v; want 128.0", r.Version, bs["chrome"].Default, err)
	}
	if r, err := bs.Find("chrome", "127"); err != nil || r.Image.Name != "selenoid/chrome:127.0" {
		t.Errorf("a Docker entry under -disable-docker is not found as configured (the hub answers it \"not available\"): %v", err)
	}
	var nf *NotFoundError
	if _, err := bs.Find("firefox", ""); !errors.As(err, &nf) || !strings.Contains(err.Error(), `its "default" "130.0" matches none of its versions; ask for one of 57.0`) {
		t.Errorf("no version asked, default unmatched: %v", err)
	}
	if _, w, err := ParseWithWarnings([]byte(mixed), true); err == nil || !strings.Contains(err.Error(), `version "127.0": "mem"`) || w != nil {
		t.Errorf("with Docker, a bad \"mem\" of a Docker entry: %v (warnings %q)", err, w)
	}
}

// The store keeps the warnings of the file it runs, each naming the file.
func TestStoreWarnings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "browsers.json")
	os.WriteFile(path, []byte(`{"chrome": {"default": "2", "versions": {"1": {"image": ["a"]}}}}`), 0o644)
	s, err := Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "-conf "+path+": ") || !strings.Contains(w[0], `"default" is "2"`) {
		t.Fatalf("warnings %q", w)
	}
	os.WriteFile(path, []byte(`{"chrome": {"default": "1", "versions": {"1": {"image": ["a"]}}}}`), 0o644)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := s.Warnings(); len(w) != 0 {
		t.Fatalf("warnings after a clean reload: %q", w)
	}
}
