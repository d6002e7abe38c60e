package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/websummoner/websummoner/internal/logtest"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// admitOrAnswer is the admit phase alone: a slot, or the refusal answered as
// POST /session answers it.
func admitOrAnswer(q *queue.Queue, w http.ResponseWriter, r *http.Request) (*queue.Slot, bool) {
	slot, err := admit(q, r, queue.Request{ID: "t", NoWait: NoWait(r.Header)})
	if err != nil {
		(&Hub{queue: q, log: slog.New(slog.DiscardHandler)}).writeCreateError(w, "t", &createError{phase: phaseAdmit, err: err})
		return nil, false
	}
	return slot, true
}

// handler reads the body, asks for a slot, and on admission answers 200 and hands
// the slot to the test; every admission result goes to results.
type handler struct {
	q       *queue.Queue
	slots   chan *queue.Slot
	results chan bool
}

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	slot, ok := admitOrAnswer(h.q, w, r)
	if ok {
		w.WriteHeader(http.StatusOK)
		h.slots <- slot
	}
	h.results <- ok
}

func newHandler(t *testing.T, opts queue.Options) handler {
	return newHandlerLog(t, opts, nil)
}

func newHandlerLog(t *testing.T, opts queue.Options, log *slog.Logger) handler {
	q, err := queue.New(opts, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	return handler{q: q, slots: make(chan *queue.Slot, 16), results: make(chan bool, 16)}
}

func post(h http.Handler, header http.Header) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/session", strings.NewReader(`{"capabilities":{}}`))
	for k, v := range header {
		req.Header[k] = v
	}
	h.ServeHTTP(rec, req)
	return rec
}

func decode(t *testing.T, rec *httptest.ResponseRecorder) webdriver.ErrorValue {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	var body webdriver.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	if body.Value.Error != "session not created" || body.Value.Message == "" {
		t.Errorf("body %+v", body.Value)
	}
	return body.Value
}

func retryAfter(t *testing.T, rec *httptest.ResponseRecorder, hi int) {
	t.Helper()
	n, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if err != nil || n < 1 || n > hi {
		t.Errorf("Retry-After %q, want a whole number in [1, %d]", rec.Header().Get("Retry-After"), hi)
	}
}

func TestNoWaitHeaders(t *testing.T) {
	for _, hdr := range []http.Header{
		{"X-Websummoner-No-Wait": {"1"}},
		{"X-Websummoner-No-Wait": {""}},
		{"X-Selenoid-No-Wait": {""}}, // as ggr sends it
		{"X-Selenoid-No-Wait": {"true"}},
	} {
		h := newHandler(t, queue.Options{Limit: 1, Timeout: time.Minute})
		if rec := post(h, hdr); rec.Code != 200 {
			t.Fatalf("%v with a free slot: %d", hdr, rec.Code)
		}
		rec := post(h, hdr)
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("%v: status %d", hdr, rec.Code)
		}
		retryAfter(t, rec, 60)
		if v := decode(t, rec); !strings.Contains(v.Message, "No-Wait") {
			t.Errorf("message %q", v.Message)
		}
		(<-h.slots).Release()
	}
	if NoWait(http.Header{"X-Other": {""}}) {
		t.Error("an unrelated header counted as no-wait")
	}
}

func TestBudgetsOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, queue.Options{Limit: 1, Timeout: 10 * time.Second})
		post(h, nil)
		start := time.Now()
		rec := post(h, nil) // queues, keeping up, 10s
		if rec.Code != 429 || time.Since(start) != 10*time.Second {
			t.Fatalf("status %d after %v", rec.Code, time.Since(start))
		}
		retryAfter(t, rec, 10)
		if v := decode(t, rec); !strings.Contains(v.Message, "keeping up") || !strings.Contains(v.Message, "-queue-timeout") {
			t.Errorf("timeout message %q", v.Message)
		}
		time.Sleep(time.Second)
		start = time.Now()
		rec = post(h, nil) // idle 11s > 10s: saturated, 1s
		if rec.Code != 429 || time.Since(start) != time.Second {
			t.Fatalf("status %d after %v", rec.Code, time.Since(start))
		}
		retryAfter(t, rec, 10)
		if v := decode(t, rec); !strings.Contains(v.Message, "saturated") || !strings.Contains(v.Message, "-queue-congestion-timeout") {
			t.Errorf("shed message %q", v.Message)
		}
		(<-h.slots).Release()
	})
}

func TestDisabledOverHTTP(t *testing.T) {
	h := newHandler(t, queue.Options{Limit: 1, Disabled: true})
	post(h, nil)
	rec := post(h, nil)
	if rec.Code != StatusDisabled || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("status %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	decode(t, rec)
	(<-h.slots).Release()
}

// A slot that frees while a request waits admits it: over a real connection.
func TestSlotFreesFirst(t *testing.T) {
	queued, log := logtest.New(16)
	h := newHandlerLog(t, queue.Options{Limit: 1}, log)
	srv := httptest.NewServer(h)
	defer srv.Close()
	post(h, nil)
	resp := make(chan int)
	go func() {
		r, err := http.Post(srv.URL, "application/json", strings.NewReader("{}"))
		if err != nil {
			resp <- 0
			return
		}
		r.Body.Close()
		resp <- r.StatusCode
	}()
	queued.Wait(t, "[QUEUED]", 10*time.Second)
	(<-h.slots).Release()
	if code := <-resp; code != 200 {
		t.Fatalf("status %d", code)
	}
	<-h.results
	(<-h.slots).Release()
}

// A real client over a real connection gives up while queued: the waiter is gone and the slot goes to the next request. The request
// has a body that the handler under test does not read itself: admit must.
func TestClientDisconnects(t *testing.T) {
	queued, log := logtest.New(16)
	q, err := queue.New(queue.Options{Limit: 1}, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan bool, 4)
	var wrote = make(chan int, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &recordingWriter{ResponseWriter: w}
		slot, ok := admitOrAnswer(q, rw, r)
		if ok {
			defer slot.Release()
		}
		wrote <- rw.status
		results <- ok
	}))
	defer srv.Close()

	hold, _ := q.Acquire(context.Background(), queue.Request{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader(`{"capabilities":{"alwaysMatch":{}}}`))
		_, err := http.DefaultClient.Do(req)
		errc <- err
	}()
	queued.Wait(t, "[QUEUED]", 10*time.Second)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("client got an answer")
	}
	if ok := <-results; ok {
		t.Fatal("a gone client was admitted")
	}
	// Nobody reads it, but a half-closed client would: an error, never a 200.
	if status := <-wrote; status != http.StatusInternalServerError {
		t.Fatalf("answered %d to a gone client", status)
	}
	if st := q.Stats(); st.Waiting != 0 || st.InUse != 1 {
		t.Fatalf("after disconnect: %+v", st)
	}
	hold.Release()
	if st := q.Stats(); st.InUse != 0 {
		t.Fatalf("slot leaked: %+v", st)
	}
}

type recordingWriter struct {
	http.ResponseWriter
	status int
}

func (w *recordingWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	return w.ResponseWriter.Write(p)
}

func TestFullAndClosedOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, queue.Options{Limit: 1, Timeout: time.Minute, MaxWaiting: 1})
		post(h, nil)
		waiting := make(chan *httptest.ResponseRecorder, 1)
		go func() { waiting <- post(h, nil) }()
		synctest.Wait()
		rec := post(h, nil)
		if rec.Code != http.StatusTooManyRequests || !strings.Contains(decode(t, rec).Message, "-queue-max") {
			t.Fatalf("full: %d %s", rec.Code, rec.Body)
		}
		retryAfter(t, rec, 60)
		h.q.Close()
		rec = <-waiting
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("closed: %d", rec.Code)
		}
		decode(t, rec)
		retryAfter(t, rec, 60)
		(<-h.slots).Release()
	})
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
// gives its place up at once; a drain refuses it with 503 and Retry-After.
func TestDetachedWaiters(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	_, body := f.do("POST", "/session", w3cChrome)
	held := body["value"].(map[string]any)["sessionId"].(string)

	queued := func(n int) {
		t.Helper()
		f.ev.Wait(t, "[QUEUED]", 5*time.Second)
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
	f.ev.Wait(t, "[CLIENT_DISCONNECTED]", 5*time.Second) // noticed at once: the detached reader saw the close
	if got := f.q.Stats().Waiting; got != 1 {
		t.Fatalf("waiting %d after a client left, want 1", got)
	}

	f.do("DELETE", "/session/"+held, "")
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
	resp, err = http.ReadResponse(bufio.NewReader(d), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a detached waiter at drain: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	f.do("DELETE", "/session/"+v.Value.SessionID, "")
}

// admit is the admit phase alone, for these tests: it drains what is left of
// r's body, then waits for a slot: Go's server
// notices a closed connection only after the body has been read to its end, and
// a client that left must not be handed a slot. A refusal is a *refusal.
func admit(q *queue.Queue, r *http.Request, req queue.Request) (*queue.Slot, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	slot, out := q.Acquire(r.Context(), req)
	if !out.Admitted {
		return nil, &refusal{out}
	}
	return slot, nil
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
	f.ev.Wait(t, "[QUEUED]", 5*time.Second)
	f.do("DELETE", "/session/"+held, "")
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
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
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
	f.ev.Wait(t, "[QUEUED]", 5*time.Second)
	f.do("DELETE", "/session/"+v.Value.SessionID, "")
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
	cl.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := clr.ReadByte(); err != io.EOF {
		t.Fatalf("the connection of a waiter that asked for close stayed open: %v", err)
	}
	f.do("DELETE", "/session/"+v.Value.SessionID, "")
}
