package hub

import (
	"sync"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/queue"
)

// The answer to DELETE means the slot is as good as free: a new session
// right after it — no-wait included, as ggr sends it — waits for the
// teardown instead of being refused (a refusal sent ggr to another host,
// where the test waited), and -limit stays exact meanwhile.
func TestNewSessionRightAfterDeleteWaitsForTheSlot(t *testing.T) {
	for _, c := range []struct {
		name string
		q    queue.Options
		hdr  []string
	}{
		{"no-wait", queue.Options{Limit: 1, Timeout: time.Minute}, []string{"X-Selenoid-No-Wait", ""}},
		{"disable-queue", queue.Options{Limit: 1, Timeout: time.Minute, Disabled: true}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &stubLauncher{stopping: make(chan struct{})}
			f := newFixture(t, c.q, Options{}, l)
			var endTeardown sync.Once
			release := func() { endTeardown.Do(func() { close(l.stopping) }) }
			t.Cleanup(release) // before the fixture's: a failed test must not hang in its EndAll
			_, body := f.do("POST", "/session", w3cChrome)
			id := body["value"].(map[string]any)["sessionId"].(string)
			if r, _ := f.do("DELETE", "/session/"+id, ""); r.StatusCode != 200 {
				t.Fatalf("DELETE: %d", r.StatusCode)
			}
			type answer struct {
				code int
				body map[string]any
			}
			next := make(chan answer, 1)
			go func() {
				r, body := f.do("POST", "/session", w3cChrome, c.hdr...)
				next <- answer{r.StatusCode, body}
			}()
			f.ev.Wait(t, "[QUEUED]", time.Minute)
			if st := f.q.Stats(); st.InUse != 1 || st.Waiting != 1 {
				t.Fatalf("during the teardown: %+v, want the old slot still in use and the new request waiting", st)
			}
			release() // the teardown ends
			a := <-next
			if a.code != 200 {
				t.Fatalf("new session right after DELETE: %d %v, want 200 once the slot was free", a.code, a.body)
			}
			f.do("DELETE", "/session/"+a.body["value"].(map[string]any)["sessionId"].(string), "")
		})
	}
}
