package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// Fair share through real basic auth, with stub drivers in containers: a
// tenant at its maxSessions waits while another takes a free slot at once;
// past its maxQueued a request is refused with 429 naming the quota; each
// user sees their own row of /status, the operator all; a SIGHUP that
// raises the quota admits the waiting request, a Python Selenium client.
func TestDockerQuotas(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	dir := t.TempDir()
	var b strings.Builder
	for _, u := range []string{"alice", "bob", "ops"} {
		h, _ := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		fmt.Fprintf(&b, "%s:%s\n", u, h)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	quotas := filepath.Join(dir, "quotas.json")
	if err := os.WriteFile(htpasswd, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(quotas, []byte(`{"alice": {"maxSessions": 1, "maxQueued": 1}, "*": {"weight": 1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// -log-level debug: the queue logs [QUEUED] for a request that waits.
	d := startDockerHub(t, instanceFor(t), "-limit", "3", "-htpasswd", htpasswd, "-admin-users", "ops", "-quotas", quotas, "-log-level", "debug")
	defer func() {
		// /status needs credentials here: the check is the hub's exit and
		// no container of its instance left.
		d.terminate(t)
		if left := containers(t, d.instance); len(left) != 0 {
			t.Errorf("containers left: %v", left)
		}
	}()
	u, _ := url.Parse(d.url)
	do := func(user, method, path, body string) (int, http.Header, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, d.url+path, strings.NewReader(body))
		req.SetBasicAuth(user, user+"-pw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, data)
		}
		return resp.StatusCode, resp.Header, v
	}
	stub := `{"capabilities":{"alwaysMatch":{"browserName":"stub"}}}`
	status, _, body := do("alice", "POST", "/wd/hub/session", stub)
	if status != 200 {
		t.Fatalf("alice's first session: %d %v", status, body)
	}
	first := body["value"].(map[string]any)["sessionId"].(string)

	// Alice's second, a Python client, waits at her maxSessions of 1 with
	// two slots free.
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	py := exec.CommandContext(ctx, python, "testdata/session.py", "http://alice:alice-pw@"+u.Host+"/wd/hub", "stub")
	pyIn, _ := py.StdinPipe()
	pyOut, _ := py.StdoutPipe()
	py.Stderr = os.Stderr
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	defer py.Wait()
	defer pyIn.Close()
	d.await(t, "[QUEUED]")

	// Bob takes a free slot at once.
	status, _, body = do("bob", "POST", "/wd/hub/session", stub)
	if status != 200 {
		t.Fatalf("bob, with slots free and alice waiting at her quota: %d %v", status, body)
	}
	bobs := body["value"].(map[string]any)["sessionId"].(string)

	// Alice's third is past her maxQueued of 1.
	status, hdr, body := do("alice", "POST", "/wd/hub/session", stub)
	v, _ := body["value"].(map[string]any)
	if status != 429 || hdr.Get("Retry-After") == "" || v["error"] != "session not created" || !strings.Contains(fmt.Sprint(v["message"]), "maxQueued") {
		t.Fatalf("alice past her maxQueued: %d %v %v", status, hdr, body)
	}
	if got := d.metric(t, `websummoner_queue_rejected_total{reason="quota"}`); got != 1 {
		t.Errorf("quota refusals = %v, want 1", got)
	}
	if got := d.metric(t, `websummoner_tenant_sessions{tenant="alice"}`); got != 1 {
		t.Errorf("alice's sessions = %v, want 1", got)
	}
	if got := d.metric(t, `websummoner_tenant_waiting{tenant="alice"}`); got != 1 {
		t.Errorf("alice's waiting = %v, want 1", got)
	}
	if got := d.metric(t, `websummoner_tenant_sessions{tenant="other"}`); got != 1 {
		t.Errorf("other tenants' sessions = %v, want 1 (bob's)", got)
	}
	rows := func(user string) map[string]bool {
		_, _, st := do(user, "GET", "/status", "")
		out := map[string]bool{}
		for _, r := range st["tenants"].([]any) {
			out[r.(map[string]any)["tenant"].(string)] = true
		}
		return out
	}
	if r := rows("bob"); len(r) != 1 || !r["bob"] {
		t.Errorf("bob's /status tenants: %v, want his own row only", r)
	}
	if r := rows("ops"); !r["alice"] || !r["bob"] {
		t.Errorf("the operator's /status tenants: %v, want every tenant", r)
	}

	// A reload that raises her quota admits her waiting client.
	if err := os.WriteFile(quotas, []byte(`{"alice": {"maxSessions": 2, "maxQueued": 1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.await(t, "[QUOTAS_RELOADED]")
	line, err := bufio.NewReader(pyOut).ReadString('\n')
	if err != nil || strings.TrimSpace(line) == "" {
		t.Fatalf("alice's waiting Python client after the reload: %q %v", line, err)
	}
	fmt.Fprintln(pyIn, "quit")
	if err := py.Wait(); err != nil {
		t.Fatalf("python client: %v", err)
	}
	for _, s := range []struct{ user, id string }{{"alice", first}, {"bob", bobs}} {
		if status, _, _ := do(s.user, "DELETE", "/wd/hub/session/"+s.id, ""); status != 200 {
			t.Fatalf("DELETE %s: %d", s.id, status)
		}
	}
}
