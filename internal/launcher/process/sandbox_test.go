package process

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/netns"
)

// Two sandboxed drivers: each is reached by the hub through its sandbox's
// address and by nothing on the host's loopback; each has a network
// namespace of its own; each runs as an unprivileged user (the hub here runs
// as root), cannot read a file of the hub's, cannot write outside its own
// directories, and gets none of the hub's environment. Nothing of either is
// left after Stop.
func TestSandboxedDrivers(t *testing.T) {
	dial := netns.New(net.Dialer{Timeout: 5 * time.Second})
	sbx, err := NewSandbox(dial)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI installs bubblewrap (scripts/deps.sh), so the sandbox must work: %v", err)
		}
		t.Skipf("no sandbox on this machine: %v", err)
	}
	// The stub must be reachable by the sandbox's user, as a driver under
	// /usr is.
	if err := os.Chmod(filepath.Dir(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "htpasswd")
	if err := os.WriteFile(secret, []byte("alice:SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEBSUMMONER_TEST_HUB_SECRET", "in-the-hub-env")
	// The "driver" reports what it can do into its download directory, then
	// becomes the stub, on the port it was given.
	// The driver is a script beside the stub (a driver outside /usr has its
	// directory, read-only).
	script := filepath.Join(filepath.Dir(stub), "check-driver")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
d=$DL; id -u > $d/uid; cat `+secret+` > $d/read 2>/dev/null; echo x > /usr/evil 2>/dev/null && echo yes > $d/wrote
echo x > `+filepath.Join(filepath.Dir(stub), "evil")+` 2>/dev/null && echo yes > $d/wrote
env > $d/env; readlink /proc/self/ns/net > $d/netns; exec `+stub+` "$1"
`), 0o755); err != nil {
		t.Fatal(err)
	}
	b := config.Resolved{Name: "check", Version: "1", Browser: &config.Browser{Image: config.Image{Command: []string{script}}, Path: "/"}}
	tr := &http.Transport{DialContext: dial.DialContext}
	defer tr.CloseIdleConnections()
	l := newLauncher(t, Options{Options: launcher.Options{ReadyTransport: tr}, Sandbox: sbx, DownloadDir: t.TempDir()})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dirs []string
	netnsOf := map[string]bool{}
	for i := range 2 {
		// The script writes where DL says: the session's download directory,
		// known only once started; it is the one writable host path.
		inst, err := l.startWithEnv(ctx, b)
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		e := inst.Endpoints()
		dl := e.Files.Path
		dirs = append(dirs, dl)
		if !netns.Holds(e.Driver.Host) {
			t.Fatalf("driver %d at %s, not a sandbox address", i, e.Driver.Host)
		}
		resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Get(e.Driver.String() + "status")
		if err != nil {
			t.Fatalf("the hub cannot reach sandboxed driver %d: %v", i, err)
		}
		resp.Body.Close()
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", sandboxPort), time.Second); err == nil {
			c.Close()
			t.Fatalf("driver %d is reachable on the host's loopback", i)
		}
		read := func(name string) string {
			b, _ := os.ReadFile(filepath.Join(dl, name))
			return strings.TrimSpace(string(b))
		}
		if os.Geteuid() == 0 && read("uid") != "65534" {
			t.Errorf("driver %d runs as uid %q, want nobody (65534)", i, read("uid"))
		}
		if strings.Contains(read("read"), "SECRET") {
			t.Errorf("driver %d read a file of the hub's", i)
		}
		if read("wrote") != "" {
			t.Errorf("driver %d wrote outside its directories", i)
		}
		if env := read("env"); strings.Contains(env, "WEBSUMMONER_TEST_HUB_SECRET") || !strings.Contains(env, "HOME=/tmp") {
			t.Errorf("driver %d environment: %q", i, env)
		}
		ns := read("netns")
		if self, _ := os.Readlink("/proc/self/ns/net"); ns == "" || ns == self || netnsOf[ns] {
			t.Errorf("driver %d network namespace %q: not one of its own (hub's %s)", i, ns, self)
		}
		netnsOf[ns] = true
		if err := inst.Stop(context.Background()); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
		if c, err := dial.DialContext(ctx, "tcp", e.Driver.Host); err == nil {
			c.Close()
			t.Fatalf("sandbox %d still reachable after Stop", i)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			entries, _ := os.ReadDir(d)
			if len(entries) > 0 {
				t.Errorf("%s left after Stop with %d entries", d, len(entries))
			}
		}
	}
	if left := MarkedPIDs(func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) }); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
}

// startWithEnv starts b with DL set to the session's download directory,
// which the launcher picks: the test reads what its driver wrote there.
func (l *Launcher) startWithEnv(ctx context.Context, b config.Resolved) (launcher.Instance, error) {
	// Start takes the newest spare directory: make one, hand it over as
	// spare, and tell the driver where it is.
	dir, err := l.downloadDir([]byte(fmt.Sprintf("%08d", time.Now().UnixNano()%1e8)))
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.spare = append(l.spare, dir)
	l.mu.Unlock()
	bb := *b.Browser
	bb.Env = append(append([]string(nil), b.Env...), "DL="+dir)
	b.Browser = &bb
	return l.Start(ctx, launcher.Request{ID: "sbx", Browser: b})
}
