package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
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

func TestInvalidFlagsStopStartUp(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-limit", "0"}, "-limit must be a whole number of at least 1"},
		{[]string{"-queue-timeout", "-1s"}, "-queue-timeout must be 0"},
		{[]string{"-queue-congestion-timeout", "5s"}, "-queue-congestion-timeout 5s needs -queue-timeout"},
		{[]string{"-queue-timeout", "1m", "-queue-congestion-timeout", "-2s"}, "-queue-congestion-timeout must be 0"},
		{[]string{"-timeout", "-1s"}, "-timeout must be 0 or a positive duration"},
		{[]string{"-service-startup-timeout", "0"}, "-service-startup-timeout must be a positive duration"},
		{[]string{"-retry-count", "0"}, "-retry-count must be at least 1"},
		{[]string{"-log-level", "loud"}, "-log-level must be"},
		{[]string{"-disable-docker", "-conf", "/nonexistent.json"}, "-conf /nonexistent.json"},
		{[]string{"stray"}, "unexpected argument"},
		{[]string{"-limit", "4", "-start-gate", "9"}, "-start-gate must be \"adaptive\", \"off\" or a number from 1 to -limit 4"},
		{[]string{"-start-gate", "fast"}, "-start-gate must be"},
		{[]string{"-queue-max", "-1"}, "-queue-max must be 0"},
	}
	for _, c := range cases {
		var stderr strings.Builder
		if code := run(c.args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

func TestVersionAndIgnoredSelenoidFlags(t *testing.T) {
	var out strings.Builder
	if code := run([]string{"-version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "websummoner ") {
		t.Fatalf("-version: %d %q", code, out.String())
	}
	if _, err := parseFlags([]string{"-video-output-dir", "/x", "-log-conf", "/y"}, io.Discard); err != nil {
		t.Fatalf("a Selenoid command line was refused: %v", err)
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
		code <- run([]string{"-disable-docker", "-conf", conf, "-listen", "127.0.0.1:0", "-queue-timeout", "5m", "-instance", "cmdtest"}, io.Discard, pw)
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
		t.Fatalf("create: %v %v", err, resp)
	}
	resp.Body.Close()

	write(`{"stub": `)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	await("[CONFIG_RELOAD_FAILED]")
	write(fmt.Sprintf(`{"stub": {"default": "1", "versions": {"1": {"image": [%q]}}}, "other": {"default": "2", "versions": {"2": {"image": [%q]}}}}`, stub, stub))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	await("[CONFIG_RELOADED]")
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
