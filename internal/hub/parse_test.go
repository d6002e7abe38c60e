package hub

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"golang.org/x/sync/semaphore"

	"github.com/websummoner/websummoner/internal/queue"
)

// A large new-session body takes its share of the read budget whole (its
// Content-Length, or chunked, once past what any body may hold without one)
// and one of the parse budget once read; it waits while either is held by
// others, goes on once they are done, and gives its shares back once its
// candidate is chosen. A small body needs no read share.
func TestNewSessionBodyShares(t *testing.T) {
	ext := strings.Repeat("A", 300<<10) // a base64 extension: the chunked body grows past its first steps
	large := `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"extensions":["` + ext + `"]}}}}`
	for _, c := range []struct {
		name    string
		body    string
		chunked bool
		held    func(*Hub) (*semaphore.Weighted, int64)
	}{
		{"declared length, read budget", large, false, func(h *Hub) (*semaphore.Weighted, int64) { return h.reads, readBudget }},
		{"chunked, read budget", large, true, func(h *Hub) (*semaphore.Weighted, int64) { return h.reads, readBudget }},
		{"parse budget", large, false, func(h *Hub) (*semaphore.Weighted, int64) { return h.parses, parseBudget }},
		{"small body, parse budget", w3cChrome, true, func(h *Hub) (*semaphore.Weighted, int64) { return h.parses, parseBudget }},
	} {
		body, chunked := c.body, c.chunked
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{mem: newMemTransport()})
			// Others hold all but a little of the budget.
			sem, all := c.held(f.hub)
			if !sem.TryAcquire(all - 1000) {
				t.Fatal("the budget is taken")
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
				t.Fatalf("%s: answered %d while the budget was held", c.name, code)
			default:
			}
			sem.Release(all - 1000)
			if code := <-status; code != http.StatusOK {
				t.Fatalf("%s: %d", c.name, code)
			}
			if !f.hub.reads.TryAcquire(readBudget) || !f.hub.parses.TryAcquire(parseBudget) {
				t.Fatalf("%s: the session kept its share of the read or parse budget", c.name)
			}
			f.hub.reads.Release(readBudget)
			f.hub.parses.Release(parseBudget)
			f.hub.queue.Close()
			f.sess.EndAll("shutdown")
		})
	}
	// A usual body goes on while large ones hold the whole read budget.
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{mem: newMemTransport()})
		if !f.hub.reads.TryAcquire(readBudget) {
			t.Fatal("the read budget is taken")
		}
		if resp, _ := f.do("POST", "/session", w3cChrome); resp.StatusCode != http.StatusOK {
			t.Fatalf("a small body behind large ones: %d", resp.StatusCode)
		}
		f.hub.queue.Close()
		f.sess.EndAll("shutdown")
	})
}
