package hub

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
)

// outcomeGate is a start gate that permits every start and records how each
// ended, as the hub reported it.
type outcomeGate struct {
	mu       sync.Mutex
	outcomes []queue.StartOutcome
}

func (g *outcomeGate) TryStart(int) bool { return true }
func (g *outcomeGate) CanStart(int) bool { return true }
func (g *outcomeGate) Notify(func())     {}
func (g *outcomeGate) FinishStart(_ int, _ string, o queue.StartOutcome, _ time.Duration) {
	g.mu.Lock()
	g.outcomes = append(g.outcomes, o)
	g.mu.Unlock()
}

func (g *outcomeGate) last(t *testing.T) queue.StartOutcome {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.outcomes) == 0 {
		t.Fatal("the start gate was told of no start")
	}
	return g.outcomes[len(g.outcomes)-1]
}

// Each start reaches the start gate as it went, through the production path
// of POST /session: a created session as a success; an engine's failure and a
// driver that fails on its own as failures (the adaptive gate cuts on them);
// a driver refusing the client's capabilities as the client's, not the
// host's.
func TestStartOutcomeReachesTheGate(t *testing.T) {
	refuse := func(status int) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == "/session" {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(status)
					w.Write([]byte(`{"value":{"error":"session not created","message":"injected"}}`))
					return
				}
				h.ServeHTTP(w, r)
			})
		}
	}
	for _, c := range []struct {
		name string
		l    *stubLauncher
		want queue.StartOutcome
	}{
		{"created", &stubLauncher{}, queue.StartSucceeded},
		{"engine failure", &stubLauncher{startErr: &launcher.StartError{Phase: launcher.PhaseStart, Browser: "chrome", Msg: "engine down (injected)", Engine: true}}, queue.StartFailed},
		{"driver fails", &stubLauncher{wrap: refuse(http.StatusInternalServerError)}, queue.StartFailed},
		{"driver refuses the capabilities", &stubLauncher{wrap: refuse(http.StatusBadRequest)}, queue.StartIgnored},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &outcomeGate{}
			f := newFixture(t, queue.Options{Limit: 1, Gate: g}, Options{}, c.l)
			resp, body := f.do("POST", "/session", w3cChrome)
			if got := g.last(t); got != c.want {
				t.Fatalf("answered %d %v; the gate was told %v, want %v", resp.StatusCode, body, got, c.want)
			}
			if resp.StatusCode == http.StatusOK {
				id := body["value"].(map[string]any)["sessionId"].(string)
				f.do("DELETE", "/session/"+id, "")
			} else if _, msg := errOf(body); !strings.Contains(msg, "injected") {
				t.Errorf("the client was not told why: %d %q", resp.StatusCode, msg)
			}
		})
	}
}
