package hub

import (
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
)

// /status hides another user's session container (a container id, or a local
// driver's pid and port) as it hides its name and capabilities; its owner and
// an operator see it.
func TestStatusHidesOthersContainer(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 2}, Options{Auth: authStore(t, "ops")}, &stubLauncher{})
	_, _, body := as(t, f, "alice", "POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"name":"alice's"}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)
	entry := func(user string) map[string]any {
		t.Helper()
		_, _, st := as(t, f, user, "GET", "/status", "")
		return st["browsers"].(map[string]any)["chrome"].(map[string]any)["128.0"].(map[string]any)["unknown"].(map[string]any)["sessions"].([]any)[0].(map[string]any)
	}
	if e := entry("bob"); e["id"] != id || e["container"] != "" || e["name"] != nil || e["caps"] != nil {
		t.Errorf("bob's /status shows alice's session as %v; want only its id", e)
	}
	for _, u := range []string{"alice", "ops"} {
		if c, _ := entry(u)["container"].(string); c == "" {
			t.Errorf("%s's /status hides the session's container", u)
		}
	}
}
