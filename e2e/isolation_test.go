package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// Two sessions' Chromium containers cannot reach each other: from inside
// session B's container (where its page runs), session A's driver (4444),
// DevTools (7070) and file server (8080) do not answer, while B's own driver
// does on its loopback (the probe works). Each session has a network of its
// own, and nothing of either is left once both end.
func TestContainersCannotReachEachOther(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	instance := instanceFor(t)
	d := startDockerHub(t, instance, "-limit", "2")
	caps := `{"capabilities":{"alwaysMatch":{"browserName":"chrome","browserVersion":"headless"}}}`
	var ids, containers []string
	for i := range 2 {
		r := call(t, "POST", d.url+"/wd/hub/session", caps)
		if r.status != 200 {
			t.Fatalf("session %d: %+v", i, r)
		}
		ids = append(ids, r.Value.SessionID)
		defer call(t, "DELETE", d.url+"/wd/hub/session/"+r.Value.SessionID, "")
	}
	out, err := exec.Command("docker", "ps", "-q", "--no-trunc", "--filter", "label=websummoner.instance="+instance).Output()
	if err != nil {
		t.Fatal(err)
	}
	containers = strings.Fields(string(out))
	if len(containers) != 2 {
		t.Fatalf("containers of the instance: %q, want 2", containers)
	}
	inspect := func(c, format string) string {
		out, err := exec.Command("docker", "inspect", "-f", format, c).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	nets := map[string]bool{}
	for _, c := range containers {
		n := inspect(c, `{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}`)
		if len(strings.Fields(n)) != 1 || nets[n] {
			t.Fatalf("container %s is on networks %q; want one of its own", c[:12], n)
		}
		nets[n] = true
	}
	a, b := containers[0], containers[1]
	ipA := inspect(a, `{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}`)
	probe := func(c, addr string) error {
		return exec.Command("docker", "exec", c, "socat", "-u", "OPEN:/dev/null", "TCP:"+addr+",connect-timeout=2").Run()
	}
	if err := probe(b, "127.0.0.1:4444"); err != nil {
		t.Fatalf("the probe does not reach B's own driver: %v", err)
	}
	for _, port := range []string{"4444", "7070", "8080"} {
		if err := probe(b, ipA+":"+port); err == nil {
			t.Errorf("session B's container reached session A's %s:%s", ipA, port)
		}
	}
	for _, id := range ids {
		call(t, "DELETE", d.url+"/wd/hub/session/"+id, "")
	}
	d.settled(t) // the teardowns, networks included, are over
	left, _ := exec.Command("docker", "network", "ls", "-q", "--filter", "label=websummoner.instance="+instance).Output()
	if s := strings.TrimSpace(string(left)); s != "" {
		t.Errorf("session networks left after both sessions ended: %s", s)
	}
}
