package hub

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/queue"
)

func TestHostAllowed(t *testing.T) {
	allowed := []string{"grid.example", ".corp.example", "Dotted.Example."}
	for _, c := range []struct {
		host string
		want bool
	}{
		{"", true},
		{"127.0.0.1:4444", true},
		{"10.1.2.3", true},
		{"[::1]:4444", true},
		{"[fe80::1]", true},
		{"[fe80::1%25eth0]:4444", true},
		{"localhost:4444", true},
		{"LOCALHOST.", true},
		{"hub.localhost:4444", true},
		{"grid.example:4444", true},
		{"GRID.example", true},
		{"corp.example", true},
		{"a.b.corp.example:80", true},
		{"dotted.example", true},
		{"evil.example:4444", false},
		{"grid.example.evil.example", false},
		{"xcorp.example", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.nip.io", false},
	} {
		if got := hostAllowed(c.host, allowed); got != c.want {
			t.Errorf("hostAllowed(%q) = %v, want %v", c.host, got, c.want)
		}
	}
}

// TestRebindingRefused: a web page that made its own name resolve to the hub
// (DNS rebinding) sends that name as Host, and Origin to match; with a Host
// check on, nothing it asks is served, and nothing starts.
func TestRebindingRefused(t *testing.T) {
	l := &stubLauncher{}
	f := newFixture(t, queue.Options{Limit: 1}, Options{AllowedHosts: []string{"grid.example"}}, l)
	send := func(method, path, host, body string) (int, string) {
		t.Helper()
		resp, out := f.do(method, path, body, "Host", host, "Origin", "http://"+host, "Content-Type", "text/plain")
		code, msg := errOf(out)
		if resp.StatusCode == http.StatusForbidden && (code != "unknown error" || !strings.Contains(msg, "-allowed-hosts")) {
			t.Errorf("%s %s Host %s: 403 with %q %q, want unknown error naming -allowed-hosts", method, path, host, code, msg)
		}
		return resp.StatusCode, msg
	}
	for _, r := range [][2]string{{"GET", "/status"}, {"GET", "/wd/hub/status"}, {"POST", "/wd/hub/session"}, {"GET", "/devtools/x/json/version"}, {"GET", "/session/x/url"}, {"GET", "/ui/state"}} {
		if st, msg := send(r[0], r[1], "evil.example:4444", w3cChrome); st != http.StatusForbidden {
			t.Errorf("%s %s from a rebound name: %d %q, want 403", r[0], r[1], st, msg)
		}
	}
	if n := l.liveCount(); n != 0 {
		t.Fatalf("%d browsers started for a rebound page", n)
	}
	// The operator hears of the name once, not once a request.
	var refused []string
	for len(f.ev) > 0 {
		if m := <-f.ev; strings.Contains(m, "[HOST_REFUSED]") {
			refused = append(refused, m)
		}
	}
	if len(refused) != 1 || !strings.Contains(refused[0], `"evil.example"`) || !strings.Contains(refused[0], "-allowed-hosts") {
		t.Errorf("refusals logged: %q, want one naming the host and -allowed-hosts", refused)
	}
	for _, host := range []string{"grid.example:4444", "127.0.0.1:4444", "localhost"} {
		if st, msg := send("GET", "/status", host, ""); st != http.StatusOK {
			t.Errorf("/status with Host %s: %d %q, want 200", host, st, msg)
		}
	}
	// Without the check (an exposed hub's default) any name is served.
	g := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	if resp, _ := g.do("GET", "/status", "", "Host", "evil.example"); resp.StatusCode != http.StatusOK {
		t.Errorf("/status with no host check: %d, want 200", resp.StatusCode)
	}
}

// Refused names are logged once a minute each, and refusedHostsPerMinute a
// minute in all: a page that makes a new name per request writes no line
// per request, and the next minute's first line counts those not logged.
func TestRefusedHostsPaced(t *testing.T) {
	var rh refusedHosts
	start := time.Now()
	logged := 0
	for i := range 15 {
		if log, _ := rh.first(fmt.Sprintf("n%d.evil.example", i), start); log {
			logged++
		}
	}
	if log, _ := rh.first("n0.evil.example", start.Add(time.Second)); log || logged != refusedHostsPerMinute {
		t.Fatalf("logged %d names in a minute (and a repeat: %v), want %d", logged, log, refusedHostsPerMinute)
	}
	if log, skipped := rh.first("n0.evil.example", start.Add(time.Minute)); !log || skipped != 15-refusedHostsPerMinute {
		t.Fatalf("the next minute: logged %v, said %d skipped, want true and %d", log, skipped, 15-refusedHostsPerMinute)
	}
}
