package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Per-session networking in Docker mode, in real Chromium: a hostsEntries name
// resolves in the browser, the container joins additionalNetworks, and takes
// containerHostname and dnsServers.
func TestDockerSessionNetworking(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	extra := fmt.Sprintf("ws-e2e-extra-%d", os.Getpid())
	if out, err := exec.Command("docker", "network", "create", extra).CombinedOutput(); err != nil {
		t.Fatalf("network: %v %s", err, out)
	}
	defer exec.Command("docker", "network", "rm", extra).Run()
	d := startDockerHub(t, instanceFor(t), "-limit", "1")
	caps := fmt.Sprintf(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{
		"hostsEntries":["wsapp.test:127.0.0.1"],"additionalNetworks":[%q],"containerHostname":"browser-one","dnsServers":["127.0.0.53"]}}}}`, extra)
	r := call(t, "POST", d.url+"/wd/hub/session", caps)
	if r.status != 200 {
		t.Fatalf("create: %+v", r)
	}
	id := r.Value.SessionID
	browser := containers(t, d.instance)[0]
	out, err := exec.Command("docker", "run", "-d", "--rm", "--network", "container:"+browser, stubTag, "-port", "8080", "-serve-page").CombinedOutput()
	if err != nil {
		t.Fatalf("page container: %v %s", err, out)
	}
	defer exec.Command("docker", "rm", "-f", strings.TrimSpace(string(out))).Run()
	if r := call(t, "POST", d.url+"/wd/hub/session/"+id+"/url", `{"url":"http://wsapp.test:8080/"}`); r.status != 200 {
		t.Fatalf("navigate to the hosts entry: %+v", r)
	}
	if title := value(t, d.url+"/wd/hub/session/"+id+"/title"); title != "WebSummoner e2e" {
		t.Fatalf("the browser did not reach wsapp.test: title %q", title)
	}
	var info []struct {
		Config          struct{ Hostname string }
		HostConfig      struct{ DNS []string }
		NetworkSettings struct {
			Networks map[string]any
		}
	}
	data, _ := exec.Command("docker", "inspect", browser).Output()
	if err := json.Unmarshal(data, &info); err != nil || len(info) != 1 {
		t.Fatalf("inspect: %v", err)
	}
	if info[0].Config.Hostname != "browser-one" || info[0].NetworkSettings.Networks[extra] == nil || strings.Join(info[0].HostConfig.DNS, ",") != "127.0.0.53" {
		t.Fatalf("container: %+v", info[0])
	}
	call(t, "DELETE", d.url+"/wd/hub/session/"+id, "")
	d.assertClean(t)
}

func value(t *testing.T, url string) any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var v struct{ Value any }
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %q", url, data)
	}
	return v.Value
}
