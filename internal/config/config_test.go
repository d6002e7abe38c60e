package config

import (
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
		{`{"chrome": {"default": "2", "versions": {"1": {"image": ["x"]}}}}`, `browser "chrome": "default" is "2", which is not one of its versions (1)`},
		{`{"chrome": {"versions": {}}}`, `browser "chrome": "versions" is empty`},
		{`{"chrome": {"versions": {"1": {"port": "4444"}}}}`, `browser "chrome" version "1": "image" is missing`},
		{`{"chrome": {"versions": {"1": {"image": 5}}}}`, `must be a Docker image name (a string) or a command line`},
		{`{"chrome": {"versions": {"1": {"image": "x", "port": "http"}}}}`, `browser "chrome" version "1": "port" "http" must be a number`},
		{`{"chrome": {"versions": {"1": {"image": "x", "path": "wd/hub"}}}}`, `browser "chrome" version "1": "path" "wd/hub" must start with /`},
		{`{"chrome": {"versions": {"1": {"image": "x", "env": ["NOEQ"]}}}}`, `"env" entry "NOEQ" must be NAME=value`},
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
	_, err := Parse([]byte(`{"chrome": {"versions": {"1": {"image": "selenoid/chrome"}}}}`), false)
	if err == nil || !strings.Contains(err.Error(), "-disable-docker") {
		t.Errorf("docker image under -disable-docker: %v", err)
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
