package hub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/queue"
)

// connFixture is a hub with one session on a stub driver, behind the server it
// runs behind in production, reached over raw client connections; seen gets
// the headers of every request the driver receives.
type connFixture struct {
	*fixture
	addr, id string
	mu       sync.Mutex
	seen     []http.Header
	block    chan struct{} // if set, POST …/url waits for it or the request's end
	blocked  chan struct{} // a request is waiting on block
	gone     chan struct{} // a blocked request's context ended
	got      chan goRead   // if set, every request the driver receives
}

func newConnFixture(t testing.TB, sopts httpserver.Options) (*connFixture, *httpserver.Server) {
	lf := &connFixture{gone: make(chan struct{}, 1), blocked: make(chan struct{}, 1)}
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			lf.mu.Lock()
			lf.seen = append(lf.seen, r.Header.Clone())
			block, got := lf.block, lf.got
			lf.mu.Unlock()
			if got != nil {
				body, err := io.ReadAll(r.Body)
				got <- goRead{r.Method, r.RequestURI, r.ContentLength, r.Close, r.Header.Clone(), body, err != nil}
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
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
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func (lf *connFixture) dial(t testing.TB) *rawConn {
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
	return "GET " + path + " HTTP/1.1\r\nHost: hub\r\nUser-Agent: conn-test\r\n\r\n"
}

func headPost(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}

// A keep-alive connection's commands — GETs, POSTs with bodies, queries,
// escapes, pipelined ones — are each answered in order with what the driver
// said, their headers passed on except the hop-by-hop ones and the hub's
// credentials.
func TestCommandStream(t *testing.T) {
	lf, _ := newConnFixture(t, httpserver.Options{})
	rc := lf.dial(t)
	s := "/wd/hub/session/" + lf.id
	rc.send(headGet(s + "/title"))
	if resp, body := rc.answer(); resp.StatusCode != 200 || !strings.Contains(body, "wdstub") {
		t.Fatalf("first command: %d %s", resp.StatusCode, body)
	}
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
	lf.mu.Lock()
	last := lf.seen[len(lf.seen)-1]
	lf.mu.Unlock()
	if last.Get("X-Probe") != "7" || last.Get("Authorization") != "" || last.Get("Keep-Alive") != "" || last.Get("Connection") != "" {
		t.Fatalf("the driver saw headers %v: want X-Probe passed on, no Authorization, Keep-Alive or Connection", last)
	}
	// An unknown session: the hub's own W3C error.
	rc.send(headGet("/session/nope/title"))
	if resp, body := rc.answer(); resp.StatusCode != 404 || !strings.Contains(body, "invalid session id") ||
		resp.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("unknown session: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// A client that hangs up on a kept-alive connection while its command waits on
// the driver is noticed: the hub's request to the driver ends, the command no
// longer holds the session (DELETE ends it at once), and no slot is left
// behind (the fixture's cleanup checks the queue).
func TestCommandNoticesAHangUp(t *testing.T) {
	lf, _ := newConnFixture(t, httpserver.Options{})
	lf.mu.Lock()
	lf.block = make(chan struct{})
	lf.mu.Unlock()
	rc := lf.dial(t)
	s := "/session/" + lf.id
	rc.send(headGet(s + "/title"))
	rc.answer()
	rc.send(headPost(s+"/url", `{"url":"https://slow.test/"}`))
	rc.c.(*net.TCPConn).SetLinger(0)
	<-lf.blocked
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

// A client that asks for 100 Continue before its body (curl does for bodies
// over 1 KiB, .NET's HttpClient by default) gets its own answer to each
// command on its kept-alive connection: the hub's server says 100 Continue
// once, and the driver's own interim answer (it too is asked by a proxy that
// passes Expect on) is never taken for the command's answer.
func TestExpectContinueClient(t *testing.T) {
	lf, _ := newConnFixture(t, httpserver.Options{})
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
// desynchronises the client's connection: conflicting lengths are the hub's 500 and the connection goes
// on; chunks beside a Content-Length are relayed by the chunks; a body short
// of its length reaches the client cut off, and the connection is closed.
func TestHostileAnswerFraming(t *testing.T) {
	lf, _ := newConnFixture(t, httpserver.Options{})
	s := "/session/" + lf.id
	hostile := func(raw string) string { return headGet(s + "/title?raw=" + url.QueryEscape(raw)) }
	cases := []struct {
		name, raw string
		status    int
		body      string // in the answer; "" for a cut-off answer
		cut       bool   // the answer breaks off and the connection closes
	}{
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 50\r\n\r\nhello", 500, "multiple Content-Length", false},
		{"chunks and a length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 200, "hello", false},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nhello", 500, "bad Content-Length", false},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", 0, "", true},
	}
	for _, c := range cases {
		for _, first := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/first=%v", c.name, first), func(t *testing.T) {
				rc := lf.dial(t)
				if !first {
					rc.send(headGet(s + "/title"))
					rc.answer()
				}
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

// hostileDriverFixture is a hub with one session whose driver answers every
// command with handle (on the hijacked connection), and the command URL.
func hostileDriverFixture(t *testing.T, handle func(c net.Conn, r *http.Request)) (*fixture, string) {
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/session" || r.Method == http.MethodDelete && strings.Count(r.URL.Path, "/") == 2 {
				h.ServeHTTP(w, r)
				return
			}
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			handle(c, r)
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	return f, f.srv.URL + "/session/" + id
}

// A driver whose answer head has no end: the hub reads at most its bound
// (1 MiB), answers 500, and does not hold what the driver sent.
func TestEndlessAnswerHeadIsBounded(t *testing.T) {
	for name, head := range map[string][2]string{
		"one endless header line": {"HTTP/1.1 200 OK\r\nX-A: ", "a"},
		"endless headers":         {"HTTP/1.1 200 OK\r\n", "X-A: a\r\n"},
	} {
		t.Run(name, func(t *testing.T) {
			_, cmd := hostileDriverFixture(t, func(c net.Conn, _ *http.Request) {
				io.WriteString(c, head[0])
				chunk := strings.Repeat(head[1], 64<<10/len(head[1]))
				for range 256 { // 16 MiB at most, until the hub hangs up
					if _, err := io.WriteString(c, chunk); err != nil {
						return
					}
				}
			})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			resp, err := http.Get(cmd + "/title")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			runtime.ReadMemStats(&after)
			if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(b), "exceeded 1048576 bytes") {
				t.Fatalf("an endless head: %d %q; want 500 naming the head's bound", resp.StatusCode, b)
			}
			// Parsing a head of the bound's size allocates up to ~17 times it
			// (textproto's map and strings); unbounded, the 16 MiB the driver
			// sends would cost some 150-200 MB.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
				t.Fatalf("reading the head allocated %d bytes", grew)
			}
		})
	}
}

// A command whose connection to the driver breaks after the driver had it and
// before its answer is not sent again when it may have acted (a POST, a
// DELETE): the client gets the error. A GET may be sent again, on a new
// connection, when the driver closed a kept one.
func TestCommandNeverSentTwiceWhenItMayHaveActed(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			var seen atomic.Int32
			_, cmd := hostileDriverFixture(t, func(c net.Conn, r *http.Request) {
				if r.URL.Path[len(r.URL.Path)-4:] == "/url" {
					seen.Add(1) // read whole, then the connection closed without an answer
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
			})
			req, _ := http.NewRequest(method, cmd+"/url", strings.NewReader(`{"url":"https://example.test/"}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusInternalServerError || seen.Load() != 1 {
				t.Fatalf("%s: %d %q, the driver had it %d times; want 500 and once", method, resp.StatusCode, b, seen.Load())
			}
		})
	}
}
