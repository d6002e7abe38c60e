package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// answer is a new-session request's answer, its body read.
type answer struct {
	code   int
	header http.Header
	body   []byte
	// close: the answer said Connection: close. Behind httptest's server that
	// marks a detached waiter's hand-written answer (Go's server keeps a
	// keep-alive connection after a 200 or a 429).
	close bool
}

// post sends POST /session to the fixture's hub, through its HTTP server if it
// has one (where a waiting request is detached), else to the handler with a
// recorder (in fake time; a recorder cannot be taken over, so the request
// waits on its handler). hdr is header names and values. It calls no t
// method: goroutines use it.
func post(f *fixture, hdr ...string) answer {
	if f.srv == nil {
		req := httptest.NewRequest("POST", "/session", strings.NewReader(w3cChrome))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		f.hub.ServeHTTP(rec, req)
		return answer{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/session", strings.NewReader(w3cChrome))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, header: resp.Header, body: b, close: resp.Close}
}

// session is the answer's session id; it fails the test without one.
func (a answer) session(t *testing.T) string {
	t.Helper()
	var v struct{ Value struct{ SessionID string } }
	if a.code != http.StatusOK || json.Unmarshal(a.body, &v) != nil || v.Value.SessionID == "" {
		t.Fatalf("want a session: %d %s", a.code, a.body)
	}
	return v.Value.SessionID
}

// refused checks a refusal: status, a W3C error body whose message has every
// word, and Retry-After a whole number of seconds in [1, retryHi] (absent
// when retryHi is 0).
func (a answer) refused(t *testing.T, status, retryHi int, words ...string) {
	t.Helper()
	if a.code != status {
		t.Fatalf("status %d, want %d: %s", a.code, status, a.body)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	var body webdriver.ErrorBody
	if err := json.Unmarshal(a.body, &body); err != nil || body.Value.Error == "" || body.Value.Message == "" {
		t.Fatalf("not a W3C error body (%v): %s", err, a.body)
	}
	for _, w := range words {
		if !strings.Contains(body.Value.Message, w) {
			t.Errorf("message %q does not say %q", body.Value.Message, w)
		}
	}
	ra := a.header.Get("Retry-After")
	if retryHi == 0 {
		if ra != "" {
			t.Errorf("Retry-After %q on a refusal that has none", ra)
		}
		return
	}
	if n, err := strconv.Atoi(ra); err != nil || n < 1 || n > retryHi {
		t.Errorf("Retry-After %q, want a whole number in [1, %d]", ra, retryHi)
	}
}

func TestNoWaitHeaders(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1, Timeout: time.Minute}, Options{}, &stubLauncher{})
	for _, hdr := range [][]string{
		{"X-Websummoner-No-Wait", "1"},
		{"X-Websummoner-No-Wait", ""},
		{"X-Selenoid-No-Wait", ""}, // as ggr sends it
		{"X-Selenoid-No-Wait", "true"},
	} {
		id := post(f, hdr...).session(t)
		post(f, hdr...).refused(t, http.StatusTooManyRequests, 60, "No-Wait")
		f.do("DELETE", "/session/"+id, "")
	}
	if NoWait(http.Header{"X-Other": {""}}) {
		t.Error("an unrelated header counted as no-wait")
	}
}

// The queue's two budgets, through POST /session: a request waits
// -queue-timeout while the grid keeps up, and only -queue-congestion-timeout
// once nothing has been admitted for longer than that.
func TestBudgetsOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, queue.Options{Limit: 1, Timeout: 10 * time.Second}, Options{}, &stubLauncher{mem: newMemTransport()})
		post(f).session(t)
		start := time.Now()
		a := post(f) // queues, keeping up, 10s
		if took := time.Since(start); took != 10*time.Second {
			t.Fatalf("refused after %v, want the 10s budget", took)
		}
		a.refused(t, http.StatusTooManyRequests, 10, "keeping up", "-queue-timeout")
		time.Sleep(time.Second)
		start = time.Now()
		a = post(f) // idle 11s > 10s: saturated, 1s
		if took := time.Since(start); took != time.Second {
			t.Fatalf("refused after %v, want the 1s congestion budget", took)
		}
		a.refused(t, http.StatusTooManyRequests, 10, "saturated", "-queue-congestion-timeout")
	})
}

func TestDisabledOverHTTP(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1, Disabled: true}, Options{}, &stubLauncher{})
	post(f).session(t)
	post(f).refused(t, StatusDisabled, 0, "-disable-queue")
}

// A full queue refuses at once; closing it refuses whoever waits, with 500 and Retry-After.
func TestFullAndClosedOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, queue.Options{Limit: 1, Timeout: time.Minute, MaxWaiting: 1}, Options{}, &stubLauncher{mem: newMemTransport()})
		post(f).session(t)
		waiting := make(chan answer, 1)
		go func() { waiting <- post(f) }()
		synctest.Wait()
		post(f).refused(t, http.StatusTooManyRequests, 60, "-queue-max")
		f.q.Close()
		(<-waiting).refused(t, http.StatusInternalServerError, 60)
	})
}

// A detached waiter's refusal is the same W3C answer as a waiting handler's:
// the status, the body, and the Retry-After a client backs off by.
func TestDetachedRefusals(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1, Timeout: time.Second}, Options{}, &stubLauncher{})
	id := post(f).session(t)
	a := post(f)
	if !a.close {
		t.Fatalf("the refusal was not written by the detached path (no Connection: close): %d %v", a.code, a.header)
	}
	a.refused(t, http.StatusTooManyRequests, 60, "-queue-")
	if st := f.q.Stats(); st.Waiting != 0 || st.InUse != 1 {
		t.Fatalf("after the refusal: %+v, want the held slot only", st)
	}
	f.do("DELETE", "/session/"+id, "")
}

// rawPost sends a new-session request on its own connection and returns the
// connection, to read the answer from (or to close). extra is header lines,
// each ending in CRLF.
func rawPost(t *testing.T, addr string, extra ...string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /session HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, strings.Join(extra, ""), len(w3cChrome), w3cChrome)
	return c
}

// A request that waits is detached from the HTTP server: admitted, it is
// answered on its connection, closed after; its client closing the connection
// gives its place up at once; a drain refuses it with 500 and Retry-After.
func TestDetachedWaiters(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	_, body := f.do("POST", "/session", w3cChrome)
	held := body["value"].(map[string]any)["sessionId"].(string)

	queued := func(n int) {
		t.Helper()
		f.ev.Wait(t, "[QUEUED]", time.Minute)
		if got := f.q.Stats().Waiting; got != n {
			t.Fatalf("waiting %d, want %d", got, n)
		}
	}
	b := rawPost(t, addr)
	defer b.Close()
	queued(1)
	gone := rawPost(t, addr)
	queued(2)
	gone.Close()
	f.ev.Wait(t, "[CLIENT_DISCONNECTED]", time.Minute) // noticed at once: the detached reader saw the close
	if got := f.q.Stats().Waiting; got != 1 {
		t.Fatalf("waiting %d after a client left, want 1", got)
	}

	f.do("DELETE", "/session/"+held, "")
	b.SetReadDeadline(time.Now().Add(time.Minute)) // a slot never given fails here, not at the suite's timeout
	resp, err := http.ReadResponse(bufio.NewReader(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !resp.Close || !strings.Contains(string(answer), `"sessionId"`) {
		t.Fatalf("the detached waiter's answer: %d close=%v %s", resp.StatusCode, resp.Close, answer)
	}
	var v struct{ Value struct{ SessionID string } }
	json.Unmarshal(answer, &v)

	d := rawPost(t, addr)
	defer d.Close()
	queued(1)
	go f.hub.Drain(context.Background())
	d.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err = http.ReadResponse(bufio.NewReader(d), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 500 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a detached waiter at drain: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	f.do("DELETE", "/session/"+v.Value.SessionID, "")
}

// Behind the hub's own server, a detached waiter's answer keeps its
// connection: the session's first command comes on the same connection and
// is served. A client that asked for Connection: close gets it, and the
// connection closes after the answer.
func TestDetachedWaiterKeepsItsConnection(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	addr := serveBehindHubServer(t, f)
	_, body := f.do("POST", "/session", w3cChrome)
	held := body["value"].(map[string]any)["sessionId"].(string)

	c := rawPost(t, addr)
	defer c.Close()
	f.ev.Wait(t, "[QUEUED]", time.Minute)
	f.do("DELETE", "/session/"+held, "")
	c.SetReadDeadline(time.Now().Add(time.Minute))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	var v struct{ Value struct{ SessionID string } }
	json.Unmarshal(answer, &v)
	if resp.StatusCode != 200 || resp.Close || v.Value.SessionID == "" {
		t.Fatalf("the detached waiter's answer: %d close=%v %s", resp.StatusCode, resp.Close, answer)
	}
	fmt.Fprintf(c, "GET /session/%s/title HTTP/1.1\r\nHost: %s\r\n\r\n", v.Value.SessionID, addr)
	c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the session's first command on the waiter's connection: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("the session's first command on the waiter's connection: %d", resp.StatusCode)
	}

	// Connection: close asked: answered so, and closed.
	cl := rawPost(t, addr, "Connection: close\r\n")
	defer cl.Close()
	f.ev.Wait(t, "[QUEUED]", time.Minute)
	f.do("DELETE", "/session/"+v.Value.SessionID, "")
	cl.SetReadDeadline(time.Now().Add(time.Minute))
	clr := bufio.NewReader(cl)
	resp, err = http.ReadResponse(clr, nil)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ = io.ReadAll(resp.Body)
	json.Unmarshal(answer, &v)
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("a waiter that asked for Connection: close: %d close=%v", resp.StatusCode, resp.Close)
	}
	cl.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := clr.ReadByte(); err != io.EOF {
		t.Fatalf("the connection of a waiter that asked for close stayed open: %v", err)
	}
	f.do("DELETE", "/session/"+v.Value.SessionID, "")
}
