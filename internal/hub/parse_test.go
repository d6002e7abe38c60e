package hub

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

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
		{"declared length, read budget", large, false, func(h *Hub) (*semaphore.Weighted, int64) { return h.reads.all, readBudget }},
		{"chunked, read budget", large, true, func(h *Hub) (*semaphore.Weighted, int64) { return h.reads.all, readBudget }},
		{"parse budget", large, false, func(h *Hub) (*semaphore.Weighted, int64) { return h.parses.all, parseBudget }},
		{"small body, parse budget", w3cChrome, true, func(h *Hub) (*semaphore.Weighted, int64) { return h.parses.all, parseBudget }},
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
			if !f.hub.reads.all.TryAcquire(readBudget) || !f.hub.parses.all.TryAcquire(parseBudget) {
				t.Fatalf("%s: the session kept its share of the read or parse budget", c.name)
			}
			f.hub.reads.all.Release(readBudget)
			f.hub.parses.all.Release(parseBudget)
			f.hub.queue.Close()
			f.sess.EndAll("shutdown")
		})
	}
	// A usual body goes on while large ones hold the whole read budget.
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{mem: newMemTransport()})
		if !f.hub.reads.all.TryAcquire(readBudget) {
			t.Fatal("the read budget is taken")
		}
		if resp, _ := f.do("POST", "/session", w3cChrome); resp.StatusCode != http.StatusOK {
			t.Fatalf("a small body behind large ones: %d", resp.StatusCode)
		}
		f.hub.queue.Close()
		f.sess.EndAll("shutdown")
	})
}

// One user's large bodies that never arrive hold at most half of the read
// budget: another user's large body is read at once beside them, and the
// shares all come back once they end.
func TestOneUserHoldsHalfTheReadBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, queue.Options{Limit: 2}, Options{Auth: authStore(t)}, &stubLauncher{mem: newMemTransport()})
		type answer struct {
			code int
			body string
		}
		post := func(user string, body io.Reader, length int64) <-chan answer {
			status := make(chan answer, 1)
			go func() {
				req := httptest.NewRequest("POST", "/session", body)
				req.ContentLength = length
				req.SetBasicAuth(user, user+"-pw")
				rec := httptest.NewRecorder()
				f.hub.ServeHTTP(rec, req)
				status <- answer{rec.Code, rec.Body.String()}
			}()
			return status
		}
		// bob declares four of the largest bodies, enough for the whole
		// budget, and sends one byte of each.
		var stalls []*io.PipeWriter
		var bobs []<-chan answer
		for range 4 {
			pr, pw := io.Pipe()
			stalls = append(stalls, pw)
			bobs = append(bobs, post("bob", io.MultiReader(strings.NewReader("{"), pr), MaxNewSessionBody-1000))
		}
		synctest.Wait()
		ext := strings.Repeat("A", 1<<20)
		body := `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"extensions":["` + ext + `"]}}}}`
		if a := <-post("alice", strings.NewReader(body), int64(len(body))); a.code != http.StatusOK {
			t.Fatalf("alice's 1 MiB body beside bob's stalled ones: %d %s", a.code, a.body)
		}
		// Bob's two past his half are told so, once their wait is over.
		time.Sleep(parseWait + time.Second)
		synctest.Wait()
		var told, cut int
		for _, s := range bobs {
			select {
			case a := <-s:
				if a.code != http.StatusInternalServerError || !strings.Contains(a.body, "as much as one user may") {
					t.Fatalf("bob's body past his half: %d %s", a.code, a.body)
				}
				told++
			default:
			}
		}
		for _, pw := range stalls {
			pw.CloseWithError(io.ErrUnexpectedEOF)
		}
		synctest.Wait()
		for _, s := range bobs {
			select {
			case a := <-s:
				if a.code != http.StatusBadRequest {
					t.Fatalf("bob's cut body: %d, want 400", a.code)
				}
				cut++
			default:
			}
		}
		if told != 2 || cut != 2 {
			t.Fatalf("bob's four bodies: %d told they were past his half, %d cut; want 2 and 2", told, cut)
		}
		if !f.hub.reads.all.TryAcquire(readBudget) {
			t.Fatal("the read budget was not given back")
		}
		f.hub.reads.all.Release(readBudget)
		if n := len(f.hub.reads.users); n != 0 {
			t.Fatalf("%d users' shares kept after their requests", n)
		}
		f.hub.queue.Close()
		f.sess.EndAll("shutdown")
	})
}
