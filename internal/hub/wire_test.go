package hub

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
)

// rawDriver answers each request on a connection with the next of answers (raw
// bytes), closing the connection after an answer when close says so. It
// stands in for drivers that answer in ways http.Server never does.
func rawDriver(t *testing.T, answers []string, closeAfter []bool) (string, *atomic.Int32) {
	var next atomic.Int32
	return serveRequests(t, func(c net.Conn, _ *http.Request, _ []byte) bool {
		i := int(next.Add(1)) - 1
		if i >= len(answers) {
			return false
		}
		io.WriteString(c, answers[i])
		return !closeAfter[i]
	})
}

// serveRequests reads the requests on every connection to a listener it
// opens and gives each, with its body, to handle, which answers on c and says
// whether the connection goes on. It returns the listener's address and a
// count of the connections accepted.
func serveRequests(t testing.TB, handle func(c net.Conn, req *http.Request, body []byte) bool) (string, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					if !handle(c, req, body) {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), &conns
}

func wireGet(t *testing.T, wr *wire, host string) (*httptest.ResponseRecorder, error, bool) {
	t.Helper()
	return wireDo(t, wr, host, "POST")
}

// wireDo sends one command with the given method.
func wireDo(t *testing.T, wr *wire, host, method string) (*httptest.ResponseRecorder, error, bool) {
	t.Helper()
	var body []byte
	var hdr http.Header
	if method == "POST" {
		body, hdr = []byte(`{"url":"x"}`), http.Header{"Content-Type": {"application/json"}}
	}
	rec := httptest.NewRecorder()
	aborted := false
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				if p != http.ErrAbortHandler {
					panic(p)
				}
				aborted = true
			}
		}()
		err = wr.do(context.Background(), rec, method, host, "/session/s/url", hdr, nil, body)
	}()
	return rec, err, aborted
}

// The wire reads every answer shape a driver may give, reuses a kept-alive
// connection, sends again on a new one when an idle connection turns out
// closed, and aborts an answer that breaks off.
func TestWire(t *testing.T) {
	host, conns := rawDriver(t, []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"value\":null}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"val\r\n9\r\nue\":true}\r\n0\r\n\r\n",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
		"HTTP/1.0 200 OK\r\n\r\n{\"value\":1}",
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"value\":",
	}, []bool{false, false, true, true, true})
	wr := newWire()
	for i, want := range []struct {
		code int
		body string
	}{{200, `{"value":null}`}, {200, `{"value":true}`}, {404, `{}`}, {200, `{"value":1}`}} {
		rec, err, aborted := wireGet(t, wr, host)
		if err != nil || aborted || rec.Code != want.code || rec.Body.String() != want.body {
			t.Fatalf("answer %d: %v aborted %v: %d %q", i, err, aborted, rec.Code, rec.Body.String())
		}
		if i == 0 && rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("headers not passed: %v", rec.Header())
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections for 4 answers, want 2: kept alive until the driver said close", n)
	}
	if _, _, aborted := wireGet(t, wr, host); !aborted {
		t.Fatal("an answer that broke off was not aborted")
	}
	if wr.total != 0 {
		t.Fatalf("%d idle connections kept after closes", wr.total)
	}
	if len(wr.idle) != 0 {
		t.Fatalf("the pool still lists %d hosts after their connections closed: %v", len(wr.idle), wr.idle)
	}
}

// An idle connection the driver closed meanwhile (here: right after its first
// answer, without saying so) costs the command nothing: it is sent again on a
// new connection.
func TestWireStaleConnection(t *testing.T) {
	host, conns := rawDriver(t, []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]",
	}, []bool{true, false})
	wr := newWire()
	if rec, err, _ := wireGet(t, wr, host); err != nil || rec.Body.String() != "{}" {
		t.Fatal(err, rec.Body.String())
	}
	if wr.total != 1 {
		t.Fatalf("%d idle connections, want the first one kept", wr.total)
	}
	// The driver's close reaches the hub before the next command is sent
	// (the next read sees it); a POST is then never sent on it.
	waitClosed(t, wr.idle[host][0].c)
	rec, err, _ := wireGet(t, wr, host)
	if err != nil || rec.Body.String() != "[]" {
		t.Fatalf("after a stale connection: %v %q", err, rec.Body.String())
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// waitClosed waits until the peer's close of c is there to read, without
// reading it.
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	if err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return n == 0 && err == nil
	}); err != nil {
		t.Fatalf("the driver's close never arrived: %v", err)
	}
}

// A connection that breaks after the driver has a command but before its
// answer: a POST (a click, a navigation) is never sent twice, since the driver
// may have carried it out; a GET is sent again on a new connection.
func TestWireNeverRepeatsACommandThatMayHaveActed(t *testing.T) {
	for _, c := range []struct {
		method    string
		repeated  bool
		wantConns int32
	}{{"POST", false, 1}, {"DELETE", false, 1}, {"GET", true, 2}} {
		host, conns := rawDriver(t, []string{
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
			"", // read whole, then the connection closed without an answer
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]",
		}, []bool{false, true, false})
		wr := newWire()
		if _, err, _ := wireDo(t, wr, host, c.method); err != nil {
			t.Fatal(err)
		}
		rec, err, _ := wireDo(t, wr, host, c.method)
		if c.repeated {
			if err != nil || rec.Body.String() != "[]" {
				t.Fatalf("%s: %v %q, want it sent again and answered", c.method, err, rec.Body.String())
			}
		} else if err == nil || !errors.Is(err, errNothingRead) {
			t.Fatalf("%s: %v %q, want the broken connection's error, not a second sending", c.method, err, rec.Body.String())
		}
		if n := conns.Load(); n != c.wantConns {
			t.Fatalf("%s: %d connections, want %d", c.method, n, c.wantConns)
		}
	}
}

// countConns starts srv, counting the connections it accepts.
func countConns(t *testing.T, srv *httptest.Server) *atomic.Int32 {
	var n atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &n
}

// The hub's own calls (new session, DELETE) over the wire: a driver URL
// without a path still yields an absolute request path, the answer is read
// whole up to its limit, and the connection is left for the next request.
func TestWireCall(t *testing.T) {
	var paths []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		switch r.URL.Path {
		case "/big":
			w.Write(make([]byte, 2048))
		case "/broken":
			w.Header().Set("Content-Length", "100")
			w.Write([]byte("{"))
		default:
			w.Write([]byte(`{"value":{"sessionId":"s"}}`))
		}
	}))
	conns := countConns(t, srv)
	base, _ := url.Parse(srv.URL) // no path, as a driver's endpoint may be
	wr := newWire()
	c, err := wr.call(context.Background(), http.MethodPost, base.JoinPath("session"), http.Header{}, []byte(`{}`), 1024)
	if err != nil || c.status != 200 || string(c.body) != `{"value":{"sessionId":"s"}}` {
		t.Fatalf("call: %v %+v", err, c)
	}
	if _, err := wr.call(context.Background(), http.MethodDelete, base.JoinPath("session", "s"), http.Header{}, nil, 1024); err != nil {
		t.Fatal(err)
	}
	if want := []string{"POST /session", "DELETE /session/s"}; !slices.Equal(paths, want) {
		t.Fatalf("the driver saw %q, want %q", paths, want)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for two calls, want 1: the call's connection is kept for the next", n)
	}
	if _, err := wr.call(context.Background(), http.MethodGet, base.JoinPath("big"), http.Header{}, nil, 1024); !errors.Is(err, errTooLarge) {
		t.Fatalf("an answer over the limit: %v, want errTooLarge", err)
	}
	if _, err := wr.call(context.Background(), http.MethodGet, base.JoinPath("broken"), http.Header{}, nil, 1024); !errors.Is(err, errAnswerBroken) {
		t.Fatalf("an answer that broke off: %v, want errAnswerBroken", err)
	}
	if _, err := wr.call(context.Background(), http.MethodGet, &url.URL{Scheme: "https", Host: base.Host}, http.Header{}, nil, 1024); err == nil {
		t.Fatal("an https driver URL was called over the plain-HTTP wire")
	}
}

// The launchers' readiness polls over the hub's client: any answer counts, a
// body is refused, and the poll's connection is the one the new-session call
// then takes.
func TestDriverClientShared(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/status" {
			w.Header().Set("X-Ready", "yes")
			w.Write([]byte(`{"value":{"ready":true}}`))
			return
		}
		w.Write([]byte(`{"value":{"sessionId":"s"}}`))
	}))
	conns := countConns(t, srv)
	dc := NewDriverClient()
	probe := &http.Client{Transport: dc}
	resp, err := probe.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != `{"value":{"ready":true}}` || resp.Header.Get("X-Ready") != "yes" {
		t.Fatalf("poll: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if _, err := probe.Post(srv.URL+"/session", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("a POST went through the readiness transport")
	}
	base, _ := url.Parse(srv.URL)
	if _, err := dc.w.call(context.Background(), http.MethodPost, base.JoinPath("session"), http.Header{}, []byte(`{}`), 1024); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for a poll and a new-session call, want 1", n)
	}
}

// A start that failed after its poll makes the client forget the host: the
// poll's connection to whatever answered is closed, not kept for a later call.
func TestDriverClientForgetsHost(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	conns := countConns(t, srv)
	dc := NewDriverClient()
	var _ launcher.HostForgetter = dc
	probe := &http.Client{Transport: dc}
	for range 2 {
		resp, err := probe.Get(srv.URL + "/status")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		dc.ForgetHost(strings.TrimPrefix(srv.URL, "http://"))
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections for two polls with the host forgotten between them, want 2", n)
	}
	if n := len(dc.w.idle); n != 0 {
		t.Fatalf("%d hosts still have idle connections", n)
	}
}

// The request reaches the driver as sent, whether its body goes behind the
// head in one write (small) or after it (over wireInlineBody): method, path,
// Host, the client's headers but not hop-by-hop ones or its credentials, a
// Content-Length of its own, the body byte for byte. On one kept-alive
// connection, and the buffer a connection keeps stays bounded after a large
// request.
func TestWireSendsTheRequestAsIs(t *testing.T) {
	type seen struct {
		method, uri, host, custom, auth, conn string
		length                                int64
		body                                  []byte
	}
	got := make(chan seen, 4)
	host, _ := serveRequests(t, func(c net.Conn, req *http.Request, body []byte) bool {
		got <- seen{req.Method, req.RequestURI, req.Host, req.Header.Get("X-Custom"), req.Header.Get("Authorization"),
			req.Header.Get("Connection"), req.ContentLength, body}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
		return true
	})
	wr := newWire()
	hdr := http.Header{"X-Custom": {"kept"}, "Authorization": {"Basic dTpw"}, "Connection": {"keep-alive"}, "Content-Length": {"1"}}
	for _, size := range []int{0, 100, wireInlineBody, wireInlineBody + 1, 60 << 10} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte('a' + i%26)
		}
		rec := httptest.NewRecorder()
		if err := wr.do(context.Background(), rec, "POST", host, "/session/s/element?x=1", hdr, nil, body); err != nil || rec.Code != 200 {
			t.Fatalf("%d-byte body: %v, %d", size, err, rec.Code)
		}
		s := <-got
		if s.method != "POST" || s.uri != "/session/s/element?x=1" || s.host != host || s.custom != "kept" ||
			s.auth != "" || s.conn != "" || s.length != int64(size) || string(s.body) != string(body) {
			t.Fatalf("%d-byte body: the driver got %s %s Host %q X-Custom %q Authorization %q Connection %q Content-Length %d, body intact %v",
				size, s.method, s.uri, s.host, s.custom, s.auth, s.conn, s.length, string(s.body) == string(body))
		}
	}
	wr.mu.Lock()
	idle := wr.idle[host]
	wr.mu.Unlock()
	if len(idle) != 1 {
		t.Fatalf("%d idle connections after five requests on a kept-alive one, want 1", len(idle))
	}
	if c := cap(idle[0].req); c > wireKeepReq {
		t.Fatalf("the connection keeps a %d-byte request buffer, more than %d", c, wireKeepReq)
	}
}

// A driver's interim answers (100 Continue, 103 Early Hints) are read past:
// the client gets the real answer, and the next command on the kept-alive
// connection gets its own, not the one before it. The client's Expect is not
// passed on (the hub holds the body). A 101, or interim answers without end,
// are errors, on a connection that is then closed.
func TestWireReadsPastInterimAnswers(t *testing.T) {
	expects := make(chan string, 8)
	var n atomic.Int32
	host, conns := serveRequests(t, func(c net.Conn, req *http.Request, body []byte) bool {
		expects <- req.Header.Get("Expect")
		i := n.Add(1)
		switch req.URL.Query().Get("kind") {
		case "switch":
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n")
			return false
		case "endless":
			for range maxInterim + 2 {
				io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
			}
			return false
		}
		// Interim answers, each in its own write, then the real one.
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n")
		io.WriteString(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%d", len(fmt.Sprint(i)), i))
		return true
	})
	wr := newWire()
	hdr := http.Header{"Expect": {"100-continue"}}
	for want := 1; want <= 3; want++ {
		rec := httptest.NewRecorder()
		if err := wr.do(context.Background(), rec, "POST", host, "/session/s/url", hdr, nil, []byte(`{"url":"x"}`)); err != nil {
			t.Fatalf("command %d: %v", want, err)
		}
		if rec.Code != 200 || rec.Body.String() != fmt.Sprint(want) || rec.Header().Get("Link") != "" {
			t.Fatalf("command %d: %d %q %v; want 200 %q, no interim headers", want, rec.Code, rec.Body.String(), rec.Header(), fmt.Sprint(want))
		}
		if e := <-expects; e != "" {
			t.Fatalf("the driver was sent Expect: %q", e)
		}
	}
	if c := conns.Load(); c != 1 {
		t.Fatalf("%d connections for three commands, want one kept alive", c)
	}
	for _, kind := range []string{"switch", "endless"} {
		rec := httptest.NewRecorder()
		err := wr.do(context.Background(), rec, "GET", host, "/session/s/url?kind="+kind, nil, nil, nil)
		<-expects
		if err == nil || rec.Code != 200 || rec.Body.Len() != 0 || rec.Flushed {
			t.Fatalf("%s: %v, %d %q; want an error and nothing written", kind, err, rec.Code, rec.Body.String())
		}
	}
	if wr.total != 0 {
		t.Fatalf("%d idle connections kept after broken answers", wr.total)
	}
}

// A driver's answer head is bounded (wireMaxHead), as a body is streamed:
// a header line without end, or headers without end, is an error once the
// head passes the bound — the hub does not buffer what a hostile driver
// sends — and the connection is dropped. So is a trailer section without end.
func TestWireBoundsTheAnswerHead(t *testing.T) {
	endless := func(start, unit string) func(c net.Conn, _ *http.Request, _ []byte) bool {
		return func(c net.Conn, _ *http.Request, _ []byte) bool {
			io.WriteString(c, start)
			chunk := strings.Repeat(unit, 64<<10/len(unit))
			for range 256 { // 16 MiB at most, until the hub hangs up
				if _, err := io.WriteString(c, chunk); err != nil {
					return false
				}
			}
			return false
		}
	}
	for name, handle := range map[string]func(net.Conn, *http.Request, []byte) bool{
		"one endless header line": endless("HTTP/1.1 200 OK\r\nX-A: ", "a"),
		"endless headers":         endless("HTTP/1.1 200 OK\r\n", "X-A: a\r\n"),
		"endless trailers":        endless("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", "X-T: a\r\n"),
	} {
		t.Run(name, func(t *testing.T) {
			host, _ := serveRequests(t, handle)
			wr := newWire()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			rec, err, aborted := wireDo(t, wr, host, "GET")
			runtime.ReadMemStats(&after)
			if !aborted && !errors.Is(err, errHeadTooLarge) {
				t.Fatalf("an endless head: %v, %d, %d bytes; want %v", err, rec.Code, rec.Body.Len(), errHeadTooLarge)
			}
			// Parsing a head of the bound's size allocates several times it
			// (textproto's map and strings); without the bound, the 16 MiB
			// the driver sent cost 150–200 MB, and an endless one without end.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
				t.Fatalf("reading the head allocated %d bytes", grew)
			}
			if wr.total != 0 {
				t.Fatal("the connection was kept")
			}
		})
	}
}
