package hub

import (
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
)

// /status hides another user's session container (a container id and
// address, or a local driver's pid and port) as it hides its name and capabilities; its owner and
// an operator see it.
func TestStatusHidesOthersContainer(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 2}, Options{Auth: authStore(t, "ops")}, &stubLauncher{container: &[2]string{"c0ffee", "172.30.0.9"}})
	_, _, body := as(t, f, "alice", "POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"alice's"}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)
	entry := func(user string) map[string]any {
		t.Helper()
		_, _, st := as(t, f, user, "GET", "/status", "")
		return st["browsers"].(map[string]any)["chrome"].(map[string]any)[""].(map[string]any)["unknown"].(map[string]any)["sessions"].([]any)[0].(map[string]any)
	}
	if e := entry("bob"); e["id"] != id || e["container"] != "" || e["containerInfo"] != nil || e["name"] != nil || e["caps"] != nil {
		t.Errorf("bob's /status shows alice's session as %v; want only its id", e)
	}
	for _, u := range []string{"alice", "ops"} {
		e := entry(u)
		if c, _ := e["container"].(string); c != "c0ffee" || e["containerInfo"] == nil {
			t.Errorf("%s's /status hides the session's container: %v", u, e)
		}
	}
}

// A session being started is pending, not used, as Selenoid counts it: total
// - used - pending is the free slots.
func TestStatusCountsAStartAsPendingOnly(t *testing.T) {
	l := &stubLauncher{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	f := newFixture(t, queue.Options{Limit: 2}, Options{}, l)
	created := make(chan struct{})
	go func() {
		defer close(created)
		f.do("POST", "/session", w3cChrome)
	}()
	<-l.entered
	_, st := f.do("GET", "/status", "")
	if st["used"] != 0.0 || st["pending"] != 1.0 || st["total"] != 2.0 {
		t.Errorf("during the start: used %v pending %v total %v, want 0, 1, 2", st["used"], st["pending"], st["total"])
	}
	close(l.block)
	<-created
	if _, st = f.do("GET", "/status", ""); st["used"] != 1.0 || st["pending"] != 0.0 {
		t.Errorf("after the start: used %v pending %v, want 1, 0", st["used"], st["pending"])
	}
}
