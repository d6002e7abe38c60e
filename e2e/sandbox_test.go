package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/websummoner/websummoner/internal/egress"
	"github.com/websummoner/websummoner/internal/launcher/process"
)

// Two users' sessions on local Chromium, each in its sandbox (-htpasswd turns
// -process-sandbox on): user B's browser loads a page from the host's
// loopback through its sandbox's proxy, and reaches nothing of user A's — not
// A's driver by any address B could know or guess (every sandboxed driver
// listens on 127.0.0.1:9515 of its own loopback; the sandboxes' addresses are
// 127.100.0.x), nor the host's files (the hub's htpasswd, /etc/shadow, the
// hub's browsers.json). After both sessions end, no process carrying the
// test's -instance marker, no proxy listener and no file of theirs is left.
func TestSandboxedSessionsAreApart(t *testing.T) {
	requireRealParts(t)
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI installs bubblewrap (scripts/deps.sh): it must be here")
		}
		t.Skip("bubblewrap is not installed (scripts/deps.sh installs it)")
	}
	var b strings.Builder
	for _, u := range []string{"alice", "bob"} {
		h, _ := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		fmt.Fprintf(&b, "%s:%s\n", u, h)
	}
	secrets := t.TempDir()
	htpasswd := filepath.Join(secrets, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// The marker every process of the hub's sessions carries.
	instance := "e2e-sandbox-" + runID
	ours := func(v string) bool { return strings.HasPrefix(v, instance+"/") }
	downloads := filepath.Join(os.TempDir(), "websummoner-downloads", instance)
	tmpBefore := nobodysTmp()
	h := startHub(t, "-limit", "2", "-htpasswd", htpasswd, "-instance", instance)
	if !strings.Contains(h.logs.String(), "[SANDBOX] [-process-sandbox auto: local drivers each run in a bubblewrap sandbox") {
		t.Error("the hub did not say at its start that its local drivers are sandboxed")
	}
	page := pageServer(t)

	alice, bob := wdUser{h, "alice"}, wdUser{h, "bob"}
	ids := map[string]string{}
	for _, u := range []wdUser{alice, bob} {
		status, v := u.do(t, "POST", "/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
		id, _ := v["sessionId"].(string)
		if status != 200 || id == "" {
			t.Fatalf("%s's session: %d %v", u.name, status, v)
		}
		ids[u.name] = id
		defer u.tryDelete(id) // when the test fails before its own DELETEs
	}
	// What B is told about A's session: nothing that says where it is.
	st := bob.status(t)
	listed := false
	for _, s := range st.sessions() {
		if s["id"] == ids["alice"] {
			listed = true
			if s["container"] != "" || s["caps"] != nil {
				t.Errorf("bob's /status shows where alice's browser is: %v", s)
			}
		}
	}
	if !listed {
		t.Fatalf("bob's /status does not list alice's session at all: the check proves nothing: %s", st.raw)
	}
	if strings.Contains(st.raw, "127.100.") {
		t.Errorf("bob's /status shows a sandbox's address: %s", st.raw)
	}

	// Each session's proxy, as its sandbox's namespace lists it, held by the hub.
	hubPID := h.hubPID(t)
	proxies := map[uint64]bool{}
	for _, pid := range process.MarkedPIDs(ours) {
		if inode := listening(pid, egress.Port); inode != 0 {
			proxies[inode] = true
		}
	}
	if len(proxies) != 2 {
		t.Fatalf("sandbox proxies found: %d, want one per session", len(proxies))
	}
	for inode := range proxies {
		if !hasSocket(hubPID, inode) {
			t.Fatalf("the hub holds no socket:[%d]: the check after the sessions would prove nothing", inode)
		}
	}

	visit := func(url string) string {
		t.Helper()
		bob.do(t, "POST", "/wd/hub/session/"+ids["bob"]+"/url", fmt.Sprintf(`{"url":%q}`, url))
		status, v := bob.doValue(t, "GET", "/wd/hub/session/"+ids["bob"]+"/source", "")
		src, _ := v.(string)
		if status != 200 {
			t.Fatalf("bob's page source after %s: %d %v", url, status, v)
		}
		return src
	}
	// The probes work: a page on the host's loopback, through the proxy, and
	// a file that is in the sandbox.
	if src := visit(page.URL); !strings.Contains(src, "Hello from 127.0.0.1") {
		t.Fatalf("bob's browser did not load the page on the host's loopback through its proxy: %.300q", src)
	}
	if src := visit("file:///etc/hosts"); !strings.Contains(src, "localhost") {
		t.Fatalf("file:///etc/hosts, which the sandbox has, did not load: %.300q", src)
	}
	// A's driver: where every sandboxed driver listens, the ports a driver or
	// DevTools commonly take, and each sandbox address.
	for _, u := range []string{"http://127.0.0.1:9515/status", "http://localhost:9515/status", "http://127.0.0.1:9222/json/version", "http://127.0.0.1:4444/status"} {
		if src := visit(u); strings.Contains(src, "ChromeDriver") || strings.Contains(src, "webSocketDebuggerUrl") {
			t.Errorf("bob's browser reached a driver at %s: %.300q", u, src)
		}
	}
	for i := 1; i <= 4; i++ {
		u := fmt.Sprintf("http://127.100.0.%d:9515/status", i)
		if src := visit(u); strings.Contains(src, "ChromeDriver") || !strings.Contains(src, "refuses") {
			t.Errorf("%s: %.300q, want the proxy's refusal", u, src)
		}
	}
	// The host's files.
	conf, _ := filepath.Abs("../config/browsers.local.json")
	for _, f := range []struct{ path, secret string }{
		{htpasswd, "alice:$2"},
		{"/etc/shadow", "root:"},
		{conf, "chromedriver"},
	} {
		if src := visit("file://" + f.path); strings.Contains(src, f.secret) {
			t.Errorf("bob's browser read the host's %s: %.300q", f.path, src)
		}
	}

	for _, u := range []wdUser{alice, bob} {
		if status, v := u.do(t, "DELETE", "/wd/hub/session/"+ids[u.name], ""); status != 200 {
			t.Fatalf("%s's DELETE: %d %v", u.name, status, v)
		}
	}
	// Logged once each teardown is over: the browser's processes are gone.
	for range 2 {
		h.await(t, "[SESSION_DELETED]")
	}
	if left := process.MarkedPIDs(ours); len(left) > 0 {
		t.Errorf("processes of the sessions left: %v", left)
	}
	for inode := range proxies {
		if hasSocket(hubPID, inode) {
			t.Errorf("a sandbox's proxy listener (socket:[%d]) is still open in the hub", inode)
		}
	}
	filepath.WalkDir(downloads, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("a session's file left: %s", path)
		}
		return nil
	})
	for name := range nobodysTmp() {
		if !tmpBefore[name] {
			t.Errorf("%s in the host's temporary directory belongs to the sandboxes' user: a sandbox wrote outside itself", name)
		}
	}
	h.stop(t)
}

// wdUser makes a user's WebDriver calls to a hub.
type wdUser struct {
	h    *hub
	name string
}

// do makes a call and returns its status and its value as an object.
func (u wdUser) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	status, v := u.doValue(t, method, path, body)
	m, _ := v.(map[string]any)
	return status, m
}

// doValue makes a call and returns its status and value.
func (u wdUser) doValue(t *testing.T, method, path, body string) (int, any) {
	t.Helper()
	req, _ := http.NewRequest(method, u.h.url+path, strings.NewReader(body))
	req.SetBasicAuth(u.name, u.name+"-pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, path, u.name, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var w struct {
		Value any `json:"value"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		t.Fatalf("%s %s as %s: %d %q", method, path, u.name, resp.StatusCode, data)
	}
	return resp.StatusCode, w.Value
}

// tryDelete ends a session, if the hub is still there to.
func (u wdUser) tryDelete(id string) {
	req, _ := http.NewRequest("DELETE", u.h.url+"/wd/hub/session/"+id, nil)
	req.SetBasicAuth(u.name, u.name+"-pw")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// statusView is /status as a user sees it.
type statusView struct {
	raw string
	v   map[string]any
}

func (u wdUser) status(t *testing.T) statusView {
	t.Helper()
	req, _ := http.NewRequest("GET", u.h.url+"/status", nil)
	req.SetBasicAuth(u.name, u.name+"-pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("/status as %s: %q", u.name, data)
	}
	return statusView{raw: string(data), v: v}
}

// sessions are /status's session entries, wherever the answer nests them.
func (s statusView) sessions() []map[string]any {
	var out []map[string]any
	var walk func(any)
	walk = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			if _, ok := x["id"]; ok {
				if _, ok := x["container"]; ok {
					out = append(out, x)
				}
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(s.v)
	return out
}

// listening is the inode of the socket listening on 127.0.0.1:port in the
// network namespace of process pid, or 0.
func listening(pid, port int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return 0
	}
	want := fmt.Sprintf("0100007F:%04X", port)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == want && f[3] == "0A" { // TCP_LISTEN
			n, _ := strconv.ParseUint(f[9], 10, 64)
			return n
		}
	}
	return 0
}

// hasSocket says whether process pid has the socket of that inode open.
func hasSocket(pid int, inode uint64) bool {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	want := fmt.Sprintf("socket:[%d]", inode)
	for _, e := range entries {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); target == want {
			return true
		}
	}
	return false
}

// nobodysTmp lists the entries of the host's temporary directory owned by
// the sandboxes' user (nobody, as the hub runs as root here); none is when
// the hub runs as another user, whose sandboxes run as that user.
func nobodysTmp() map[string]bool {
	out := map[string]bool{}
	if os.Geteuid() != 0 {
		return out
	}
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 65534 {
			out[e.Name()] = true
		}
	}
	return out
}
