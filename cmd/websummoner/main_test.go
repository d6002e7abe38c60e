package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every invalid value: exit status 2, a message naming the flag, and nothing
// started (the -listen address stays free, no sweep ran).
func TestInvalidFlagsStopStartUp(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-limit", "0"}, "-limit must be a whole number from 1 to 10000"},
		{[]string{"-limit", "1000000000"}, "-limit must be a whole number from 1 to 10000 (got 1000000000)"},
		{[]string{"-timeout", "1ns"}, "-timeout must be 0 (never) or at least 1s"},
		{[]string{"-queue-timeout", "1m", "-queue-congestion-timeout", "2m"}, "is longer than -queue-timeout"},
		{[]string{"-limit", "x"}, "invalid value \"x\" for flag -limit"},
		{[]string{"-queue-timeout", "-1s"}, "-queue-timeout must be 0"},
		{[]string{"-queue-congestion-timeout", "5s"}, "-queue-congestion-timeout 5s needs -queue-timeout"},
		{[]string{"-queue-timeout", "1m", "-queue-congestion-timeout", "-2s"}, "-queue-congestion-timeout must be 0"},
		{[]string{"-queue-max", "-1"}, "-queue-max must be 0"},
		{[]string{"-queue-max-bytes", "lots"}, "-queue-max-bytes must be 0 (unbounded) or a size"},
		{[]string{"-timeout", "-1s"}, "-timeout must be 0 or a positive duration"},
		{[]string{"-max-timeout", "-1s"}, "-max-timeout must be 0 or a positive duration"},
		{[]string{"-session-attempt-timeout", "-1s"}, "-session-attempt-timeout must be"},
		{[]string{"-service-startup-timeout", "-1s"}, "-service-startup-timeout must be a positive duration"},
		{[]string{"-session-delete-timeout", "-1s"}, "-session-delete-timeout must be a positive duration"},
		{[]string{"-graceful-period", "-1s"}, "-graceful-period must be 0 or a positive duration"},
		{[]string{"-max-procs", "2"}, "flag provided but not defined: -max-procs"},
		{[]string{"-fast-lanes=false"}, "flag provided but not defined: -fast-lanes"},
		{[]string{"-first-byte-gate=maybe"}, "-first-byte-gate takes true or false"},
		{[]string{"-retry-count", "-1"}, "-retry-count must be at least 1"},
		{[]string{"-instance", "a/b"}, "-instance must be a name without"},
		{[]string{"-instance", strings.Repeat("i", 81)}, "-instance must be at most 80 bytes (got 81)"},
		{[]string{"-log-level", "loud"}, "-log-level must be"},
		{[]string{"-log-format", "xml"}, "-log-format must be text or json"},
		{[]string{"-disable-docker", "-conf", "/nonexistent.json"}, "-conf /nonexistent.json"},
		{[]string{"stray"}, "unexpected argument"},
		{[]string{"-limit", "4", "-start-gate", "9"}, "-start-gate must be \"adaptive\", \"off\" or a number from 1 to -limit 4"},
		{[]string{"-start-gate", "fast"}, "invalid value \"fast\" for flag -start-gate"},
		{[]string{"-container-address", "addr"}, "-container-address must be"},
		{[]string{"-container-address", "name"}, "-container-address name needs -container-network"},
		{[]string{"-mem", "lots"}, "-mem:"},
		{[]string{"-cpu", "-1"}, "-cpu:"},
		{[]string{"-sweep-interval", "-1s"}, "-sweep-interval must be a positive duration"},
		{[]string{"-container-pids-limit", "-1"}, "-container-pids-limit must be 0"},
		{[]string{"-enable-file-upload=maybe"}, "invalid boolean value"},
		// A directory that is there but cannot be written in (a read-only
		// volume; /proc here, as the tests may run as root): every
		// enableLog session lost its log at its end.
		{[]string{"-log-output-dir", "/proc"}, "-log-output-dir /proc: the hub cannot write in it"},
	}
	for _, c := range cases {
		var stderr strings.Builder
		args := append([]string{"-conf", "../../config/browsers.docker.json", "-listen", "127.0.0.1:0"}, c.args...)
		if code := run(args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
		if strings.Contains(stderr.String(), "[INIT]") {
			t.Errorf("%v: the hub started before refusing", c.args)
		}
	}
}

// Selenoid's command lines parse unchanged: every one of its flags, boolean ones
// bare (as in `selenoid -enable-file-upload -limit 2`), the others with a value.
func TestSelenoidCommandLine(t *testing.T) {
	args := []string{
		"-disable-docker", "-disable-queue", "-enable-file-upload", "-capture-driver-logs",
		"-disable-privileged", "-save-all-logs", "-limit", "2",
		"-listen", ":4444", "-conf", "config/browsers.json", "-log-conf", "config/container-logs.json",
		"-timeout", "1m", "-max-timeout", "1h", "-session-attempt-timeout", "30s", "-session-delete-timeout", "30s",
		"-service-startup-timeout", "30s", "-graceful-period", "300s", "-retry-count", "1",
		"-container-network", "default", "-mem", "1g", "-cpu", "1.0", "-log-output-dir", "logs",
		"-video-output-dir", "video", "-video-recorder-image", "selenoid/video-recorder:latest-release",
	}
	c, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("a Selenoid command line was refused: %v", err)
	}
	if c.queue.Limit != 2 || !c.queue.Disabled || !c.process.CaptureLogs || !c.disableDocker || c.docker.Mem != "1g" ||
		!c.process.SaveAllLogs || !c.docker.SaveAllLogs || c.process.LogDir != "logs" || c.docker.LogDir != "logs" || c.hub.LogDir != "logs" ||
		c.docker.VideoDir != "video" || c.docker.VideoImage != "selenoid/video-recorder:latest-release" {
		t.Fatalf("values not bound: %+v", c)
	}
	var ignored []string
	for _, s := range c.ignored {
		ignored = append(ignored, s.name)
	}
	want := "enable-file-upload disable-privileged log-conf"
	if strings.Join(ignored, " ") != want {
		t.Fatalf("ignored %v, want %s", ignored, want)
	}
	var out strings.Builder
	if code := run([]string{"-version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "websummoner ") {
		t.Fatalf("-version: %d %q", code, out.String())
	}
}

// One flag feeds every component that needs it: -session-delete-timeout the
// launchers' stop and the hub's DELETE, -limit the queue and the start gate.
func TestFlagsBoundOnce(t *testing.T) {
	c, err := parseFlags([]string{"-session-delete-timeout", "7s", "-service-startup-timeout", "9s", "-limit", "3", "-instance", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.hub.SessionDeleteTimeout != 7*time.Second || c.process.StopTimeout != 7*time.Second || c.docker.StopTimeout != 7*time.Second {
		t.Errorf("-session-delete-timeout: hub %v process %v docker %v", c.hub.SessionDeleteTimeout, c.process.StopTimeout, c.docker.StopTimeout)
	}
	if c.process.StartupTimeout != 9*time.Second || c.docker.StartupTimeout != 9*time.Second || c.docker.Instance != "x" {
		t.Errorf("launcher options %+v / %+v", c.process.Options, c.docker.Options)
	}
	if c.gate.Limit != 3 || c.queue.Limit != 3 {
		t.Errorf("-limit: gate %d queue %d", c.gate.Limit, c.queue.Limit)
	}
}

// The whole program in-process with the stub driver as a local process: start-up
// line with the derived numbers, SIGHUP reload (bad file kept out, good file taken),
// SIGTERM drain and exit 0.
func TestRunReloadAndShutdown(t *testing.T) {
	dir := t.TempDir()
	stub := filepath.Join(dir, "wdstub")
	if out, err := exec.Command("go", "build", "-o", stub, "github.com/websummoner/websummoner/cmd/wdstub").CombinedOutput(); err != nil {
		t.Fatalf("build wdstub: %v\n%s", err, out)
	}
	conf := filepath.Join(dir, "browsers.json")
	write := func(doc string) {
		if err := os.WriteFile(conf, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf(`{"stub": {"default": "1", "versions": {"1": {"image": [%q]}}}}`, stub))
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"-disable-docker", "-conf", conf, "-listen", "127.0.0.1:0", "-queue-timeout", "5m", "-instance", "cmdtest", "-enable-file-upload", "-log-conf", "x", "-tenant-header", "X-Team"}, io.Discard, pw)
		pw.Close()
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	await := func(tag string) string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("log ended before %s", tag)
				}
				if strings.Contains(l, tag) {
					return l
				}
			case <-timeout:
				t.Fatalf("no %s", tag)
			}
		}
	}
	for _, want := range []string{"[FLAG_IGNORED] [-enable-file-upload] [file upload always works", "[FLAG_IGNORED] [-log-conf] [it sets browser containers' log driver"} {
		if line := await("[FLAG_IGNORED]"); !strings.Contains(line, want) {
			t.Errorf("ignored-flag warning %q, want %q", line, want)
		}
	}
	if line := await("[INSECURE]"); !strings.Contains(line, "[-tenant-header X-Team] [a request's tenant is what this header says, unchecked") {
		t.Errorf("-tenant-header without -htpasswd: %q", line)
	}
	initLine := await("[INIT]")
	for _, want := range []string{"queue-timeout=5m0s", "fast-threshold=15s", "keeping-up-budget=5m0s", "saturated-budget=30s"} {
		if !strings.Contains(initLine, want) {
			t.Errorf("start-up line lacks %s: %s", want, initLine)
		}
	}
	addr := regexp.MustCompile(`listening on (\S+)\]`).FindStringSubmatch(initLine)[1]
	base := "http://" + addr

	resp, err := http.Post(base+"/session", "application/json", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`))
	if err != nil || resp.StatusCode != 200 {
		var body []byte
		if resp != nil {
			body, _ = io.ReadAll(resp.Body)
		}
		t.Fatalf("create: %v %v %s", err, resp, body)
	}
	var created struct {
		Value struct {
			SessionID string `json:"sessionId"`
		} `json:"value"`
	}
	json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()

	// What Prometheus is told of the last reload.
	reloaded := func() string {
		t.Helper()
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^websummoner_config_last_reload_successful\{file="browsers.json"\} (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no websummoner_config_last_reload_successful in /metrics")
		}
		return string(m[1])
	}
	if got := reloaded(); got != "1" {
		t.Fatalf("at start, the config's reload metric is %s", got)
	}
	write(`{"stub": `)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	await("[CONFIG_RELOAD_FAILED]")
	if got := reloaded(); got != "0" {
		t.Fatalf("after a failed reload, the metric is %s", got)
	}
	write(fmt.Sprintf(`{"stub": {"default": "1", "versions": {"1": {"image": [%q]}}}, "other": {"default": "2", "versions": {"2": {"image": [%q]}}}}`, stub, stub))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	await("[CONFIG_RELOADED]")
	if got := reloaded(); got != "1" {
		t.Fatalf("after a good reload, the metric is %s", got)
	}
	resp, err = http.Get(base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Used     int                       `json:"used"`
		Browsers map[string]map[string]any `json:"browsers"`
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.Browsers["other"] == nil || st.Used != 1 {
		t.Fatalf("after reload: %+v", st)
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	await("[DRAINING]")
	// A reload while draining reloads, and cuts nothing short: it ended
	// every live session at once.
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	await("[CONFIG_RELOADED]")
	resp, err = http.Get(base + "/session/" + created.Value.SessionID + "/url")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a command after SIGHUP in the drain: %v %v", err, resp)
	}
	resp.Body.Close()
	syscall.Kill(os.Getpid(), syscall.SIGTERM) // a second signal cuts the grace period short
	await("[SESSION_SHUTDOWN]")
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not exit")
	}
}

// Beyond loopback the hub warns: without authentication, or with it but
// without TLS; on loopback it says nothing.
func TestExposureWarning(t *testing.T) {
	addr := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	for _, c := range []struct {
		addr      string
		auth, tls bool
		want      string
	}{
		{"127.0.0.1:4444", false, false, ""},
		{"[::1]:4444", false, false, ""},
		{"0.0.0.0:4444", false, false, "every interface) without authentication"},
		{"[::]:4444", false, false, "without authentication"},
		{"0.0.0.0:4444", true, false, "without TLS"},
		{"0.0.0.0:4444", true, true, ""},
	} {
		got := exposure(addr(c.addr), c.auth, c.tls)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s auth=%v tls=%v: %q, want %q", c.addr, c.auth, c.tls, got, c.want)
		}
	}
}

// TestAllowedHostsDefault: unset, the Host check is on for a hub on loopback
// only; "*" turns it off; names are taken as given, and what could never
// match a Host is refused.
func TestAllowedHostsDefault(t *testing.T) {
	for _, c := range []struct {
		flag, listen string
		want         []string // nil: no check
	}{
		{"", "127.0.0.1:4444", []string{}},
		{"", "localhost:4444", []string{"localhost"}},
		{"", "[::1]:4444", []string{}},
		{"", ":4444", nil},
		{"", "0.0.0.0:4444", nil},
		{"*", "127.0.0.1:4444", nil},
		{"grid.example, *.corp.example,", ":4444", []string{"grid.example", ".corp.example"}},
	} {
		got, err := allowedHosts(c.flag, c.listen, nil)
		if err != nil || (got == nil) != (c.want == nil) || strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("allowedHosts(%q, %q) = %#v, %v, want %#v", c.flag, c.listen, got, err, c.want)
		}
	}
	// The machine's own names are taken with the check on, and not when off.
	if got, _ := allowedHosts("", "127.0.0.1:4444", []string{"vm", "vm.corp.example"}); strings.Join(got, "|") != "vm|vm.corp.example" {
		t.Errorf("the machine's names with -listen 127.0.0.1:4444: %#v", got)
	}
	if got, _ := allowedHosts("grid.example", ":4444", []string{"vm"}); strings.Join(got, "|") != "vm|grid.example" {
		t.Errorf("the machine's names beside -allowed-hosts: %#v", got)
	}
	if got, _ := allowedHosts("", ":4444", []string{"vm"}); got != nil {
		t.Errorf("the check on for a hub on every interface: %#v", got)
	}
	for _, bad := range []string{"hub:4444", "grid.example,*", "http://grid.example"} {
		if _, err := allowedHosts(bad, ":4444", nil); err == nil || !strings.Contains(err.Error(), "-allowed-hosts") {
			t.Errorf("-allowed-hosts %q: %v, want a refusal naming the flag", bad, err)
		}
	}
}

// TestOwnNames: the machine's names are its host name, that name's first
// label, and what /etc/hosts maps to a loopback address; nothing else.
func TestOwnNames(t *testing.T) {
	hosts := "127.0.0.1\tlocalhost\n127.0.1.1 vm.corp.example vm # Debian's\n::1 ip6-localhost ip6-loopback\n" +
		"10.0.0.5 db.corp.example\n# 127.0.0.1 commented\n127.0.0.2 elsewhere\n"
	// An ad blocker's hosts file maps thousands of names to loopback:
	// only the first few are taken.
	for i := range 5000 {
		hosts += fmt.Sprintf("127.0.0.1 ads%d.example\n", i)
	}
	got := ownNames("VM.corp.example.", []byte(hosts))
	want := "vm.corp.example|vm|ip6-localhost|ip6-loopback|ads0.example|ads1.example|ads2.example|ads3.example|" +
		"ads4.example|ads5.example|ads6.example|ads7.example|ads8.example|ads9.example|ads10.example|ads11.example"
	if strings.Join(got, "|") != want {
		t.Errorf("ownNames = %q, want %q", strings.Join(got, "|"), want)
	}
}
