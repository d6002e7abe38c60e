package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/queue"
)

// laneFixture is a hub with one session on a stub driver, behind the server it
// runs behind in production; seen gets the headers of every request the driver
// receives.
type laneFixture struct {
	*fixture
	addr, id string
	mu       sync.Mutex
	seen     []http.Header
	block    chan struct{} // if set, POST …/url waits for it or the request's end
	blocked  chan struct{} // a request is waiting on block
	gone     chan struct{} // a blocked request's context ended
}

func newLaneFixture(t *testing.T, sopts httpserver.Options) (*laneFixture, *httpserver.Server) {
	lf := &laneFixture{gone: make(chan struct{}, 1), blocked: make(chan struct{}, 1)}
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			lf.mu.Lock()
			lf.seen = append(lf.seen, r.Header.Clone())
			block := lf.block
			lf.mu.Unlock()
			if raw := r.URL.Query().Get("raw"); raw != "" {
				// An answer no Go server writes (a hostile driver's): raw
				// bytes on the hijacked connection, which is then closed.
				c, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					io.WriteString(c, raw)
					c.Close()
				}
				return
			}
			if block != nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/url") {
				// Read whole, so that Go's server watches for the hub's close.
				b, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(strings.NewReader(string(b)))
				lf.blocked <- struct{}{}
				select {
				case <-block:
				case <-r.Context().Done():
					lf.gone <- struct{}{}
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	}}
	lf.fixture = newFixture(t, queue.Options{Limit: 2}, Options{}, l)
	srv, err := httpserver.New(sopts, lf.hub, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	lf.addr = ln.Addr().String()
	_, body := lf.do("POST", "/session", w3cChrome)
	lf.id = body["value"].(map[string]any)["sessionId"].(string)
	return lf, srv
}

// rawConn is a client connection that writes bytes as given and reads answers.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (lf *laneFixture) dial(t *testing.T) *rawConn {
	c, err := net.Dial("tcp", lf.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

// answer reads one answer, to a HEAD request when head is set; an interim
// 100 Continue is read past.
func (rc *rawConn) answer(head ...bool) (*http.Response, string) {
	rc.t.Helper()
	var req *http.Request
	if len(head) > 0 && head[0] {
		req = &http.Request{Method: http.MethodHead}
	}
	resp, err := http.ReadResponse(rc.br, req)
	if err == nil && resp.StatusCode == http.StatusContinue {
		resp, err = http.ReadResponse(rc.br, req)
	}
	if err != nil {
		rc.t.Fatalf("reading an answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.t.Fatalf("reading an answer's body: %v", err)
	}
	return resp, string(b)
}

func headGet(path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: hub\r\nUser-Agent: lane-test\r\n\r\n"
}

func headPost(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}

// After a connection's first command, its next commands are served by the
// lane — GETs, POSTs with bodies, queries, escapes, pipelined ones — each
// answered in order with what the driver said, its headers passed on except
// the hop-by-hop ones and the hub's credentials.
func TestLaneServesACommandStream(t *testing.T) {
	lf, _ := newLaneFixture(t, httpserver.Options{})
	rc := lf.dial(t)
	s := "/wd/hub/session/" + lf.id
	rc.send(headGet(s + "/title"))
	if resp, body := rc.answer(); resp.StatusCode != 200 || !strings.Contains(body, "wdstub") {
		t.Fatalf("first command: %d %s", resp.StatusCode, body)
	}
	before := lf.hub.laneCommands.Load()
	for i := range 40 {
		want := fmt.Sprintf("https://example.test/%d?q=%%20x", i)
		rc.send(headPost(s+"/url", `{"url":"`+want+`"}`))
		if resp, body := rc.answer(); resp.StatusCode != 200 || body != `{"value":null}`+"\n" {
			t.Fatalf("command %d: %d %q", i, resp.StatusCode, body)
		}
		rc.send(headGet("/session/" + lf.id + "/url"))
		resp, body := rc.answer()
		var got struct{ Value string }
		if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 || got.Value != want {
			t.Fatalf("command %d: %d %q, want the url %q", i, resp.StatusCode, body, want)
		}
	}
	// Pipelined: two requests in one write, answered in order.
	rc.send(headGet(s+"/echo?a=1") + "GET " + s + "/echo?b=%7E2 HTTP/1.1\r\nHost: hub\r\nX-Probe: 7\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nAuthorization: Basic dTpw\r\n\r\n")
	for _, want := range []string{`"query":"a=1"`, `"query":"b=%7E2"`} {
		if resp, body := rc.answer(); resp.StatusCode != 200 || !strings.Contains(body, want) {
			t.Fatalf("pipelined: %d %s; want %s in it", resp.StatusCode, body, want)
		}
	}
	if n := lf.hub.laneCommands.Load() - before; n != 82 {
		t.Fatalf("the lane served %d of the 82 commands after the first", n)
	}
	lf.mu.Lock()
	last := lf.seen[len(lf.seen)-1]
	lf.mu.Unlock()
	if last.Get("X-Probe") != "7" || last.Get("Authorization") != "" || last.Get("Keep-Alive") != "" || last.Get("Connection") != "" {
		t.Fatalf("the driver saw headers %v: want X-Probe passed on, no Authorization, Keep-Alive or Connection", last)
	}
	// An unknown session, through the lane: the hub's own W3C error.
	rc.send(headGet("/session/nope/title"))
	if resp, body := rc.answer(); resp.StatusCode != 404 || !strings.Contains(body, "invalid session id") ||
		resp.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("unknown session: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// Whatever the lane does not serve goes back to Go's HTTP server byte for
// byte, and its answer is the one a fresh connection gets for the same bytes:
// other endpoints, other methods and versions, malformed heads, bodies of
// unknown length, Expect, long heads. The connection stays usable where Go's
// server keeps it, and the lane takes it again at the next command.
func TestLaneHandsBackWhatItDoesNotServe(t *testing.T) {
	lf, _ := newLaneFixture(t, httpserver.Options{})
	s := "/session/" + lf.id
	cases := map[string]string{
		"status":             headGet("/status"),
		"delete session":     "DELETE /wd/hub/session/nope HTTP/1.1\r\nHost: hub\r\n\r\n",
		"HEAD":               "HEAD " + s + "/title HTTP/1.1\r\nHost: hub\r\n\r\n",
		"HTTP/1.0":           "GET " + s + "/title HTTP/1.0\r\nHost: hub\r\n\r\n",
		"absolute form":      "GET http://hub" + s + "/title HTTP/1.1\r\nHost: hub\r\n\r\n",
		"dot segments":       headGet(s + "/%2e%2e/%2e%2e/status"),
		"no host":            "GET " + s + "/title HTTP/1.1\r\nX: y\r\n\r\n",
		"two hosts":          "GET " + s + "/title HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"bad host":           "GET " + s + "/title HTTP/1.1\r\nHost: a b\r\n\r\n",
		"bad header":         "GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nNo colon here\r\n\r\n",
		"space before colon": "GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nX-A : b\r\n\r\n",
		"folded header":      "GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nX-A: b\r\n c\r\n\r\n",
		"bare LF":            "GET " + s + "/title HTTP/1.1\nHost: hub\n\n",
		"control in value":   "GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nX-A: b\x01c\r\n\r\n",
		"bad escape":         headGet(s + "/title%zz"),
		"two lengths":        "POST " + s + "/url HTTP/1.1\r\nHost: hub\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
		"signed length":      "POST " + s + "/url HTTP/1.1\r\nHost: hub\r\nContent-Length: +2\r\n\r\n{}",
		"chunked":            "POST " + s + "/url HTTP/1.1\r\nHost: hub\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"expect":             "POST " + s + "/url HTTP/1.1\r\nHost: hub\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
		"connection option":  "GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nConnection: X-Secret\r\nX-Secret: 1\r\n\r\n",
		"upload":             headPost(s+"/se/file", `{"file":""}`),
		"long head":          "GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nX-Long: " + strings.Repeat("a", 6000) + "\r\n\r\n",
		"unknown method":     "PATCH " + s + "/title HTTP/1.1\r\nHost: hub\r\n\r\n",
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			isHead := strings.HasPrefix(req, "HEAD ")
			fresh := lf.dial(t)
			fresh.send(req)
			want, wantBody := fresh.answer(isHead)
			rc := lf.dial(t)
			rc.send(headGet(s + "/title")) // the first command: the lane takes the connection after it
			rc.answer()
			rc.send(headGet(s + "/title")) // served by the lane
			rc.answer()
			before := lf.hub.laneCommands.Load()
			rc.send(req)
			got, gotBody := rc.answer(isHead)
			// /status tells how long the queue has idled: not the same twice.
			idled := regexp.MustCompile(`"idleSeconds":[0-9.e-]+`)
			wantBody, gotBody = idled.ReplaceAllString(wantBody, ""), idled.ReplaceAllString(gotBody, "")
			if got.StatusCode != want.StatusCode || gotBody != wantBody {
				t.Fatalf("through a lane: %d %q; on a fresh connection: %d %q", got.StatusCode, gotBody, want.StatusCode, wantBody)
			}
			if lf.hub.laneCommands.Load() != before {
				t.Fatalf("the lane served %q", req)
			}
			if want.Close {
				return // Go's server closes after it: nothing more to check
			}
			rc.send(headGet(s + "/title"))
			rc.answer()
			rc.send(headGet(s + "/title"))
			if resp, body := rc.answer(); resp.StatusCode != 200 || !strings.Contains(body, "wdstub") {
				t.Fatalf("after the hand-back: %d %s", resp.StatusCode, body)
			}
			if lf.hub.laneCommands.Load() == before {
				t.Fatal("the lane did not take the connection again")
			}
		})
	}
}

// Connection: close on a lane's command: answered, then closed.
func TestLaneClosesWhenAsked(t *testing.T) {
	lf, _ := newLaneFixture(t, httpserver.Options{})
	rc := lf.dial(t)
	s := "/session/" + lf.id
	rc.send(headGet(s + "/title"))
	rc.answer()
	rc.send("GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n")
	if resp, body := rc.answer(); resp.StatusCode != 200 || !strings.Contains(body, "wdstub") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if n, err := rc.br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after Connection: close, read %d bytes, %v; want the end", n, err)
	}
}

// A client that hangs up while a lane's command waits on the driver is
// noticed: the hub's request to the driver ends, the command no longer holds
// the session (DELETE ends it at once), and no slot is left behind (the
// fixture's cleanup checks the queue).
func TestLaneNoticesAHangUp(t *testing.T) {
	lf, _ := newLaneFixture(t, httpserver.Options{})
	lf.mu.Lock()
	lf.block = make(chan struct{})
	lf.mu.Unlock()
	rc := lf.dial(t)
	s := "/session/" + lf.id
	rc.send(headGet(s + "/title"))
	rc.answer()
	before := lf.hub.laneCommands.Load()
	rc.send(headPost(s+"/url", `{"url":"https://slow.test/"}`))
	rc.c.(*net.TCPConn).SetLinger(0)
	<-lf.blocked
	if lf.hub.laneCommands.Load() == before {
		t.Fatal("the command reached the driver, but not through the lane")
	}
	rc.c.Close()
	select {
	case <-lf.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the driver's request did not end after the client hung up")
	}
	if resp, body := lf.do("DELETE", "/session/"+lf.id, ""); resp.StatusCode != 200 {
		t.Fatalf("DELETE after the hang-up: %d %v", resp.StatusCode, body)
	}
}

// An idle lane is closed after the idle timeout; at Shutdown an idle lane is
// closed at once and a busy one answers its command first.
func TestLaneIdleTimeoutAndShutdown(t *testing.T) {
	lf, srv := newLaneFixture(t, httpserver.Options{IdleTimeout: 300 * time.Millisecond})
	s := "/session/" + lf.id
	idle := lf.dial(t)
	idle.send(headGet(s + "/title"))
	idle.answer()
	start := time.Now()
	if _, err := idle.br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("an idle lane: %v; want it closed", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("an idle lane was closed after %v, before the idle timeout of 300ms", took)
	}

	lf.mu.Lock()
	lf.block = make(chan struct{})
	lf.mu.Unlock()
	busy, idle2 := lf.dial(t), lf.dial(t)
	for _, rc := range []*rawConn{busy, idle2} {
		rc.send(headGet(s + "/title"))
		rc.answer()
	}
	before := lf.hub.laneCommands.Load()
	busy.send(headPost(s+"/url", `{"url":"https://slow.test/"}`))
	<-lf.blocked
	if lf.hub.laneCommands.Load() == before {
		t.Fatal("the command reached the driver, but not through the lane")
	}
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	if _, err := idle2.br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("an idle lane at shutdown: %v; want it closed", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a lane's command ran", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(lf.block)
	if resp, body := busy.answer(); resp.StatusCode != 200 {
		t.Fatalf("the busy lane's answer at shutdown: %d %s", resp.StatusCode, body)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := busy.br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a busy lane after its answer at shutdown: %v; want it closed", err)
	}
}

// A client that asks for 100 Continue before its body (curl does for bodies
// over 1 KiB, .NET's HttpClient by default) gets its own answer to each
// command on its kept-alive connection: the hub's server says 100 Continue
// once, and the driver's own interim answer (it too is asked by a proxy that
// passes Expect on) is never taken for the command's answer.
func TestExpectContinueClient(t *testing.T) {
	lf, _ := newLaneFixture(t, httpserver.Options{})
	var conns atomic.Int32
	tr := &http.Transport{ExpectContinueTimeout: 5 * time.Second, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conns.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	s := "http://" + lf.addr + "/wd/hub/session/" + lf.id
	for i := range 30 {
		want := fmt.Sprintf("https://example.test/%d/%s", i, strings.Repeat("x", 2000))
		req, _ := http.NewRequest("POST", s+"/url", strings.NewReader(`{"url":"`+want+`"}`))
		req.Header.Set("Content-Type", "application/json")
		if i%2 == 0 {
			req.Header.Set("Expect", "100-continue")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != `{"value":null}`+"\n" {
			t.Fatalf("command %d: %d %q", i, resp.StatusCode, b)
		}
		resp, err = client.Get(s + "/url")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Value string }
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || got.Value != want {
			t.Fatalf("command %d: the url %.40q…, %v; want %.40q…", i, got.Value, err, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 60 commands, want one kept alive", n)
	}
	lf.mu.Lock()
	defer lf.mu.Unlock()
	for _, h := range lf.seen {
		if h.Get("Expect") != "" {
			t.Fatalf("the driver was sent Expect: %v", h)
		}
	}
}

// A driver's answer that frames its body two ways, or breaks off, never
// desynchronises the client's connection, whether Go's server or a lane
// serves the command: conflicting lengths are a 502 and the connection goes
// on; chunks beside a Content-Length are relayed by the chunks; a body short
// of its length reaches the client cut off, and the connection is closed.
func TestHostileAnswerFraming(t *testing.T) {
	lf, _ := newLaneFixture(t, httpserver.Options{})
	s := "/session/" + lf.id
	hostile := func(raw string) string { return headGet(s + "/title?raw=" + url.QueryEscape(raw)) }
	cases := []struct {
		name, raw string
		status    int
		body      string // in the answer; "" for a cut-off answer
		cut       bool   // the answer breaks off and the connection closes
	}{
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 50\r\n\r\nhello", 502, "conflicting Content-Length", false},
		{"chunks and a length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 200, "hello", false},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nhello", 502, "malformed Content-Length", false},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", 0, "", true},
	}
	for _, c := range cases {
		for _, viaLane := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/lane=%v", c.name, viaLane), func(t *testing.T) {
				rc := lf.dial(t)
				if viaLane {
					rc.send(headGet(s + "/title"))
					rc.answer()
				}
				before := lf.hub.laneCommands.Load()
				rc.send(hostile(c.raw))
				if c.cut {
					resp, err := http.ReadResponse(rc.br, nil)
					if err == nil {
						var b []byte
						b, err = io.ReadAll(resp.Body)
						if err == nil {
							t.Fatalf("a body short of its length reached the client as whole: %d %q", resp.StatusCode, b)
						}
					}
					if n, err := rc.br.Read(make([]byte, 1)); err == nil {
						t.Fatalf("after a cut-off answer the connection stays open (%d bytes more)", n)
					}
				} else {
					resp, body := rc.answer()
					if resp.StatusCode != c.status || !strings.Contains(body, c.body) {
						t.Fatalf("%d %q; want %d with %q", resp.StatusCode, body, c.status, c.body)
					}
					if served := lf.hub.laneCommands.Load() != before; served != viaLane {
						t.Fatalf("served by a lane: %v, want %v", served, viaLane)
					}
					for range 2 {
						rc.send(headGet(s + "/title"))
						if resp, body := rc.answer(); resp.StatusCode != 200 || body != `{"value":"wdstub"}`+"\n" {
							t.Fatalf("the next command: %d %q", resp.StatusCode, body)
						}
					}
				}
			})
		}
	}
}

// A lane's answer never carries more than the length its head declares, and
// one short of it is not whole (the lane then closes the connection).
func TestLaneWriterKeepsToItsLength(t *testing.T) {
	lw := &laneWriter{hdr: http.Header{}}
	lw.reset()
	lw.Header().Set("Content-Length", "3")
	lw.WriteHeader(200)
	if n, err := lw.Write([]byte("he")); n != 2 || err != nil || lw.whole() {
		t.Fatalf("2 of 3 bytes: %d, %v, whole %v", n, err, lw.whole())
	}
	if _, err := lw.Write([]byte("llo")); err == nil || lw.whole() {
		t.Fatalf("past the declared length: %v, whole %v; want an error", err, lw.whole())
	}
	if out := string(lw.finish()); !strings.HasSuffix(out, "\r\n\r\nhel") {
		t.Fatalf("sent %q; want the head and 3 bytes of body", out)
	}
	lw.reset()
	lw.Header().Set("Content-Length", "2")
	lw.WriteHeader(200)
	lw.Write([]byte("{}"))
	if !lw.whole() || !strings.HasSuffix(string(lw.finish()), "\r\n\r\n{}") {
		t.Fatal("an answer of its declared length is not whole")
	}
}
