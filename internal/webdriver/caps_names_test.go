package webdriver

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// parseOptions parses a body whose selenoid:options (or websummoner:options,
// as key says) are opts, through ParseNewSession and Candidates as the hub does.
func parseOpts(t *testing.T, key string, opts map[string]any) error {
	t.Helper()
	body, err := json.Marshal(map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{key: opts}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ParseNewSession(body)
	if err == nil {
		_, err = n.Candidates()
	}
	return err
}

// logName and videoName name a plain file in the output directory: no path,
// not hidden, no control characters, at most 255 bytes (issue 33), 240 for a
// video, whose temporary name is 15 bytes longer. Anything else is a name, as
// in Selenoid: test names carry spaces, brackets, '#', ':' and accents.
func TestFileNameOptionsArePlainNames(t *testing.T) {
	bad := []string{
		"../x.log", "a/b.log", `a\b.log`, "/etc/passwd", `..\x.log`, "x/",
		".hidden.log", ".", "..", "a\nb.log", "a\rb.log", "a\x00b.log", "a\tb.log", "a\x7fb.log", "a\u0085b.log",
		strings.Repeat("a", 252) + ".log",
	}
	for _, key := range []string{SelenoidOptionsKey, OptionsKey} {
		for _, opt := range []string{"logName", "videoName"} {
			for _, n := range bad {
				err := parseOpts(t, key, map[string]any{opt: n})
				var ae *ArgumentError
				if !errors.As(err, &ae) || !strings.Contains(err.Error(), key+"."+opt) {
					t.Errorf("%s.%s %q: err = %v, want an ArgumentError naming %s.%s", key, opt, n, err, key, opt)
				}
			}
		}
	}
	good := []string{"run-1.log", "checkout_2026.mp4", strings.Repeat("a", 196) + ".mp4",
		"Checkout test (chrome 128) [retry 2] #3 a+b @home, ok.mp4", "Anmeldung prüfen – Größe ändern.log", "テスト ログイン",
		"Login: step 1.2", "no extension", "javascript:alert(1).log", "100% done", "a..b", "x.", "'quoted' \"too\" & <b>"}
	for _, n := range good {
		for _, opt := range []string{"logName", "videoName"} {
			if err := parseOpts(t, SelenoidOptionsKey, map[string]any{opt: n}); err != nil {
				t.Errorf("%s %q refused: %v", opt, n, err)
			}
		}
	}
	long := strings.Repeat("é", 120) + ".log" // 244 bytes of UTF-8: a file name Linux takes
	if err := parseOpts(t, SelenoidOptionsKey, map[string]any{"logName": long}); err != nil {
		t.Errorf("logName of %d bytes refused: %v", len(long), err)
	}
	if err := parseOpts(t, SelenoidOptionsKey, map[string]any{"videoName": strings.Repeat("v", 236) + ".mp4"}); err != nil {
		t.Errorf("videoName of 240 bytes refused: %v", err)
	}
	if err := parseOpts(t, SelenoidOptionsKey, map[string]any{"videoName": strings.Repeat("v", 237) + ".mp4"}); err == nil {
		t.Error("videoName of 241 bytes accepted; its temporary name would be longer than a file name may be")
	}
}

// hostsEntries are "host:ip" with a host name and an IP address, nothing more:
// a newline in one added lines to /etc/hosts (issue 33); dnsServers are IPs.
func TestHostsEntriesAndDNSServersAreChecked(t *testing.T) {
	bad := []string{
		"a.test:10.0.0.1\n10.0.0.2 evil.test", "a.test:10.0.0.1 b.test", "a test:10.0.0.1", "a.test: 10.0.0.1",
		"a.test:10.0.0.1\r", "\ta.test:10.0.0.1", ":10.0.0.1", "a.test:", "a.test:dns.example", "-a.test:10.0.0.1",
		"a..test:10.0.0.1", "a.test:fe80::1%eth0", strings.Repeat("a", 64) + ".test:10.0.0.1", "a/b:10.0.0.1",
		"a\x00b:10.0.0.1",
	}
	for _, e := range bad {
		err := parseOpts(t, SelenoidOptionsKey, map[string]any{"hostsEntries": []string{"ok.test:10.0.0.9", e}})
		var ae *ArgumentError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "hostsEntries") {
			t.Errorf("hostsEntries %q: err = %v, want an ArgumentError naming hostsEntries", e, err)
		}
	}
	for _, e := range []string{"a.test:10.0.0.1", "b.test:::1", "db:192.168.1.2", "svc_x.internal:2001:db8::1", "host.docker.internal:172.17.0.1"} {
		if err := parseOpts(t, SelenoidOptionsKey, map[string]any{"hostsEntries": []string{e}}); err != nil {
			t.Errorf("hostsEntries %q refused: %v", e, err)
		}
	}
	for _, d := range []string{"dns.example", "1.1.1.1\n", " 1.1.1.1", "1.1.1.1:53", ""} {
		err := parseOpts(t, SelenoidOptionsKey, map[string]any{"dnsServers": []string{d}})
		var ae *ArgumentError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "dnsServers") {
			t.Errorf("dnsServers %q: err = %v, want an ArgumentError naming dnsServers", d, err)
		}
	}
	if err := parseOpts(t, SelenoidOptionsKey, map[string]any{"dnsServers": []string{"1.1.1.1", "2606:4700::1111"}}); err != nil {
		t.Errorf("IP dnsServers refused: %v", err)
	}
}
