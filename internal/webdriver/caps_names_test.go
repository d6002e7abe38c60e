package webdriver

import (
	"encoding/json"
	"errors"
	"fmt"
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
	for _, e := range []string{"a.test:10.0.0.1", "b.test:::1", "db:192.168.1.2", "svc_x.internal:2001:db8::1", "host.docker.internal:172.17.0.1", "app.test:host-gateway"} {
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

// What a session keeps of its options and /status shows to everyone is
// bounded: an unbounded label makes every /status as large, and an env
// entry past what a process's environment holds fails the driver's exec
// (E2BIG) as a start failure. Each is refused, naming the option.
func TestKeptOptionsAreBounded(t *testing.T) {
	many := func(n int) map[string]any {
		m := map[string]any{}
		for i := range n {
			m[strings.Repeat("k", 3)+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = "v"
		}
		return m
	}
	bigEnvs := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = fmt.Sprintf("LC_%d=%s", i, strings.Repeat("x", 30<<10))
		}
		return out
	}
	envs := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = "LC_X=1"
		}
		return out
	}
	for name, c := range map[string]struct {
		opts map[string]any
		want string
	}{
		"a huge label":     {map[string]any{"labels": map[string]any{"big": strings.Repeat("x", 4097)}}, `labels["big"] is too long`},
		"a huge label key": {map[string]any{"labels": map[string]any{strings.Repeat("k", 256): "v"}}, "labels["},
		"too many labels":  {map[string]any{"labels": many(101)}, "labels has 101 entries"},
		"a huge name":      {map[string]any{"name": strings.Repeat("n", 4097)}, "name is 4097 bytes"},
		"a huge env entry": {map[string]any{"env": []any{"LC_ALL=" + strings.Repeat("x", 200_000)}}, `env entry "LC_ALL" is 200007 bytes`},
		"too many env":     {map[string]any{"env": envs(257)}, "env has 257 entries"},
		"env over 256 KiB": {map[string]any{"env": bigEnvs(9)}, "env holds"},
	} {
		err := parseOpts(t, SelenoidOptionsKey, c.opts)
		var ae *ArgumentError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ArgumentError saying %q", name, err, c.want)
		}
	}
	for name, opts := range map[string]map[string]any{
		"labels at the bound": {"labels": map[string]any{strings.Repeat("k", 255): strings.Repeat("v", 4096)}},
		"100 labels":          {"labels": many(100)},
		"a long test name":    {"name": strings.Repeat("n", 4096)},
		"256 env entries":     {"env": envs(256)},
		"a 32 KiB env entry":  {"env": []any{"LC_ALL=" + strings.Repeat("x", 32<<10-len("LC_ALL="))}},
	} {
		if err := parseOpts(t, SelenoidOptionsKey, opts); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}
