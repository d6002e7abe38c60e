package hub

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/websummoner/websummoner/internal/queue"
)

// A new-session body takes its share of the read budget before it is read
// (its whole Content-Length, or step by step when chunked), waits while the
// budget is held by others, goes on once they are done, and gives its shares
// back once its candidate is chosen.
func TestNewSessionBodyShares(t *testing.T) {
	ext := strings.Repeat("A", 300<<10) // a base64 extension: the chunked body grows past its first steps
	body := `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"extensions":["` + ext + `"]}}}}`
	for _, chunked := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{mem: newMemTransport()})
			// Others' bodies hold all but a little of the budget.
			if !f.hub.reads.TryAcquire(readBudget - 1000) {
				t.Fatal("the read budget is taken")
			}
			status := make(chan int, 1)
			go func() {
				req := httptest.NewRequest("POST", "/session", strings.NewReader(body))
				if chunked {
					req.ContentLength = -1
				}
				rec := httptest.NewRecorder()
				f.hub.ServeHTTP(rec, req)
				status <- rec.Code
			}()
			synctest.Wait()
			select {
			case code := <-status:
				t.Fatalf("chunked %v: answered %d while the budget was held", chunked, code)
			default:
			}
			f.hub.reads.Release(readBudget - 1000)
			if code := <-status; code != http.StatusOK {
				t.Fatalf("chunked %v: %d", chunked, code)
			}
			if !f.hub.reads.TryAcquire(readBudget) || !f.hub.parses.TryAcquire(parseBudget) {
				t.Fatalf("chunked %v: the session kept its share of the read or parse budget", chunked)
			}
			f.hub.reads.Release(readBudget)
			f.hub.parses.Release(parseBudget)
			f.hub.queue.Close()
			f.sess.EndAll("shutdown")
		})
	}
}
