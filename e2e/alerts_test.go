package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The operator's side on real parts: Debian's promtool, Prometheus and
// Alertmanager, against a real hub.

func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is required in CI (scripts/deps.sh installs it): %v", name, err)
		}
		t.Skipf("%s not installed: %v", name, err)
	}
	return path
}

// The shipped rules load, and their unit tests over synthetic series pass.
func TestAlertRules(t *testing.T) {
	promtool := requireTool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "../deploy/prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// A real scrape of a Docker-mode hub passes promtool's metric lint (names,
// units, help), after a session has made every labelled series exist.
func TestMetricsLint(t *testing.T) {
	promtool := requireTool(t, "promtool")
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1")
	s := newSession(t, d, "stub")
	call(t, "DELETE", d.url+"/wd/hub/session/"+s.Value.SessionID, "")
	newSession(t, d, "ghost") // a failed start, so the failure series exist too
	resp, err := http.Get(d.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = resp.Body
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	d.assertClean(t)
}

// webhook is Alertmanager's receiver: it records each notification's status
// and alert names.
type webhook struct {
	mu   sync.Mutex
	seen []string // "firing WebSummonerQueueCongested", "resolved …"
	got  chan struct{}
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var msg struct {
		Status string `json:"status"`
		Alerts []struct {
			Status string            `json:"status"`
			Labels map[string]string `json:"labels"`
		} `json:"alerts"`
	}
	json.NewDecoder(r.Body).Decode(&msg)
	w.mu.Lock()
	for _, a := range msg.Alerts {
		w.seen = append(w.seen, a.Status+" "+a.Labels["alertname"])
	}
	w.mu.Unlock()
	select {
	case w.got <- struct{}{}:
	default:
	}
}

func (w *webhook) has(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.seen {
		if x == s {
			return true
		}
	}
	return false
}

// alertState is the state Prometheus's API gives the alert ("" when none).
func alertState(t *testing.T, prom, name string) string {
	t.Helper()
	resp, err := http.Get(prom + "/api/v1/alerts")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&v)
	for _, a := range v.Data.Alerts {
		if a.Labels["alertname"] == name {
			return a.State
		}
	}
	return ""
}

// waitFor polls an outside process's state (Prometheus, Alertmanager run on
// their own clocks) until cond holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// The design card's "ops alerting on websummoner_queue_congested", shown
// working: Prometheus scrapes a hub every second; the test jams the hub (its
// only slot held by a browser that never becomes ready, -queue-timeout 4s); the
// congested alert goes pending, then firing in Prometheus's API; Alertmanager
// delivers it to the test's webhook; when the jam clears it resolves, and the
// webhook hears that too. The rules are the shipped file with the congested
// alert's "for" shortened from 2m to 3s (the only change), so the run takes
// seconds.
func TestAlertingEndToEnd(t *testing.T) {
	prometheus := requireTool(t, "prometheus")
	alertmanager := requireTool(t, "prometheus-alertmanager")
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1", "-queue-timeout", "4s", "-service-startup-timeout", "2m")
	dir := t.TempDir()

	hook := &webhook{got: make(chan struct{}, 1)}
	hookSrv := httptest.NewServer(hook)
	defer hookSrv.Close()
	amPort := freePort(t)
	amConf := fmt.Sprintf(`route:
  receiver: test
  group_by: [alertname, instance]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: %s/
        send_resolved: true
`, hookSrv.URL)
	os.WriteFile(filepath.Join(dir, "am.yml"), []byte(amConf), 0o644)
	am := exec.Command(alertmanager, "--config.file="+filepath.Join(dir, "am.yml"), "--storage.path="+filepath.Join(dir, "am"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", amPort), "--cluster.listen-address=")
	startDaemon(t, am, fmt.Sprintf("http://127.0.0.1:%d/-/ready", amPort))

	rules, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	short := strings.Replace(string(rules), "expr: websummoner_queue_congested == 1\n        for: 2m", "expr: websummoner_queue_congested == 1\n        for: 3s", 1)
	if short == string(rules) {
		t.Fatal("the congested rule is not where the test expects it")
	}
	os.WriteFile(filepath.Join(dir, "alerts.yml"), []byte(short), 0o644)
	promPort := freePort(t)
	promConf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%s]
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["127.0.0.1:%d"]
scrape_configs:
  - job_name: websummoner
    static_configs:
      - targets: [%q]
`, filepath.Join(dir, "alerts.yml"), amPort, strings.TrimPrefix(d.url, "http://"))
	os.WriteFile(filepath.Join(dir, "prom.yml"), []byte(promConf), 0o644)
	prom := fmt.Sprintf("http://127.0.0.1:%d", promPort)
	startDaemon(t, exec.Command(prometheus, "--config.file="+filepath.Join(dir, "prom.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort)), prom+"/-/ready")

	// The jam: the one slot held by a start that never answers.
	ctx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	req, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/wd/hub/session", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"slow"}}}`))
	jam := make(chan struct{})
	go func() { defer close(jam); http.DefaultClient.Do(req) }()

	const name = "WebSummonerQueueCongested"
	if !waitFor(2*time.Minute, func() bool { return alertState(t, prom, name) == "pending" }) {
		t.Fatalf("the congested alert never went pending (state %q, hub congested %v)", alertState(t, prom, name), d.metric(t, "websummoner_queue_congested"))
	}
	if !waitFor(2*time.Minute, func() bool { return alertState(t, prom, name) == "firing" }) {
		t.Fatalf("the congested alert went pending but never fired (state %q)", alertState(t, prom, name))
	}
	if !waitFor(2*time.Minute, func() bool { return hook.has("firing " + name) }) {
		t.Fatalf("Alertmanager did not deliver the firing alert; webhook saw %v", hook.seen)
	}

	giveUp() // the client gives up: its start is abandoned, the slot freed
	<-jam
	if !waitFor(2*time.Minute, func() bool { return alertState(t, prom, name) == "" }) {
		t.Fatalf("the alert did not resolve after the jam cleared (state %q)", alertState(t, prom, name))
	}
	if !waitFor(2*time.Minute, func() bool { return hook.has("resolved " + name) }) {
		t.Fatalf("Alertmanager did not deliver the resolution; webhook saw %v", hook.seen)
	}
	d.assertClean(t)
}

// startDaemon runs a server for the test's length and waits until ready answers 200.
func startDaemon(t *testing.T, cmd *exec.Cmd, ready string) {
	t.Helper()
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if !waitFor(2*time.Minute, func() bool {
		resp, err := http.Get(ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		t.Fatalf("%s did not become ready:\n%s", cmd.Path, out.String())
	}
}
