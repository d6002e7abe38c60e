package hub

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/httpserver"
)

// goRead is what an HTTP server made of one request.
type goRead struct {
	method, uri string
	length      int64
	close       bool
	header      http.Header
	body        []byte
	short       bool // the body ended before its length
}

// forwardedHeaders are the headers a client sends that the hub does not pass
// to the driver: hop-by-hop ones, its credentials, Expect (answered by the
// hub's server), and the X-Forwarded set (ReverseProxy's Rewrite drops them).
var forwardedHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authorization": true,
	"Proxy-Authenticate": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Authorization": true, "Expect": true, "Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true,
	"X-Forwarded-Proto": true, "Content-Length": true, "Accept-Encoding": true, "User-Agent": true,
}

// headOracle returns a check that a request sent to the hub reaches the
// driver exactly as Go's HTTP server reads the same bytes — method, target,
// body and the headers that are passed on — and reaches it not at all when
// Go's server refuses them: no request is split, joined or altered on the way
// (no smuggling between the client's framing and the driver's).
func headOracle(tb testing.TB) func(t testing.TB, in []byte) {
	reads := make(chan goRead, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		reads <- goRead{r.Method, r.RequestURI, r.ContentLength, r.Close, r.Header.Clone(), body, err != nil}
		w.Header().Set("Connection", "close")
	})}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	lf, _ := newConnFixture(tb, httpserver.Options{})
	lf.mu.Lock()
	lf.got = make(chan goRead, 64)
	lf.mu.Unlock()
	return func(t testing.TB, in []byte) {
		t.Helper()
		// A session of the check's own: a request of an earlier check that
		// reaches its driver late is told apart by its session id.
		resp, err := http.Post(lf.srv.URL+"/session", "application/json", strings.NewReader(w3cChrome))
		if err != nil {
			t.Fatal(err)
		}
		var created struct{ Value struct{ SessionID string } }
		err = json.NewDecoder(resp.Body).Decode(&created)
		resp.Body.Close()
		id := created.Value.SessionID
		if err != nil || id == "" {
			t.Fatalf("creating the check's session: %d, %v", resp.StatusCode, err)
		}
		defer func() {
			req, _ := http.NewRequest(http.MethodDelete, lf.srv.URL+"/session/"+id, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		in = bytes.ReplaceAll(in, []byte("{id}"), []byte(id))
		// What Go's server reads of the bytes on their own.
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		client.SetDeadline(time.Now().Add(10 * time.Second))
		client.Write(in)
		client.(*net.TCPConn).CloseWrite()
		var want *goRead
		short := false
		if resp, err := http.ReadResponse(bufio.NewReader(client), nil); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				if g := <-reads; !g.short {
					want = &g // a request whose body is whole
				} else {
					short = true
				}
			}
		}
		select {
		case <-reads: // a second request in the bytes: read by neither check
		default:
		}
		client.Close()
		// What the driver receives of the same bytes through the hub. The
		// hub's server takes a client's half-close for a hang-up, which
		// cancels its request: so the write side is closed only once the
		// first answer is in (or at once for bytes Go's server refuses), and
		// the connection read to its end, when every request on it is done.
		rc := lf.dial(t)
		rc.c.Write(in)
		if want != nil {
			if resp, err := http.ReadResponse(rc.br, &http.Request{Method: want.method}); err == nil {
				io.Copy(io.Discard, resp.Body)
			}
		}
		rc.c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, rc.br)
		rc.c.Close()
		var got []goRead
		for more := true; more; {
			select {
			case g := <-lf.got:
				if strings.Contains(g.uri, "/session/"+id+"/") {
					got = append(got, g)
				}
			default:
				more = false
			}
		}
		if want == nil || dotSegment(want.uri) {
			// Refused by Go's server, or a path with a dot segment, which the
			// hub refuses: nothing of it may reach the driver whole.
			switch {
			case len(got) > 0 && short && !got[0].short:
				t.Fatalf("%q: its body ends short of its length, but the driver received it whole: %s %s %q", in, got[0].method, got[0].uri, got[0].body)
			case len(got) > 0 && !short:
				t.Fatalf("%q: refused, but the driver received %s %s", in, got[0].method, got[0].uri)
			}
			return
		}
		target, err := url.ParseRequestURI(want.uri)
		if err != nil {
			return
		}
		cid, rest, isCmd := commandPath(target.EscapedPath())
		if u, err := url.PathUnescape(cid); err == nil {
			cid = u
		}
		if !isCmd || routed(rest) || cid != id {
			return // not a command of the check's session: other tests cover those
		}
		if !slices.Contains([]string{"GET", "HEAD", "POST", "DELETE"}, want.method) {
			// Not a WebDriver method as sent ("get", PUT): refused, as a
			// driver may read it as one the hub did not check it as.
			if len(got) > 0 {
				t.Fatalf("%q: %s is no command method, but the driver received %s %s", in, want.method, got[0].method, got[0].uri)
			}
			return
		}
		if len(got) == 0 {
			t.Fatalf("%q: Go's server reads %s %s, but the driver received nothing", in, want.method, want.uri)
		}
		g := got[0]
		wantURI := want.uri
		if i := strings.Index(wantURI, "/session/"); i > 0 {
			wantURI = wantURI[i:] // the hub passes the path from /session/ on
		}
		// A character a target must not hold raw ("#") reaches the driver
		// escaped: the same path.
		if u, err := url.PathUnescape(g.uri); err == nil && u == wantURI {
			g.uri = wantURI
		}
		if g.method != want.method || g.uri != wantURI || !bytes.Equal(g.body, want.body) {
			t.Fatalf("%q: the driver received %s %s body %q; Go's server reads %s %s body %q", in, g.method, g.uri, g.body, want.method, wantURI, want.body)
		}
		// Headers the Connection header names are the connection's own too.
		dropped := maps.Clone(forwardedHeaders)
		for _, v := range want.header["Connection"] {
			for name := range strings.SplitSeq(v, ",") {
				dropped[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
			}
		}
		for k, v := range want.header {
			if !dropped[k] && !slices.Equal(g.header[k], v) {
				t.Fatalf("%q: header %s reached the driver as %q; Go's server read %q", in, k, g.header[k], v)
			}
		}
		for k := range g.header {
			if _, sent := want.header[k]; !sent && !dropped[k] {
				t.Fatalf("%q: the driver received header %s the client did not send", in, k)
			}
		}
	}
}

// headSeeds are requests where a parser's corners are; {id} is the
// fixture's session.
var headSeeds = []string{
	"GET /session/{id}/title HTTP/1.1\r\nHost: hub\r\n\r\n",
	"POST /wd/hub/session/{id}/url HTTP/1.1\r\nHost: hub\r\nContent-Length: 11\r\n\r\n{\"url\":\"x\"}",
	"GET /session/{id}/echo?b=%7E2 HTTP/1.1\r\nHost: hub\r\nX-Probe: 7\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nAuthorization: Basic dTpw\r\n\r\n",
	"DELETE /session/{id}/window HTTP/1.1\r\nhost: [::1]:4444\r\nConnection: close\r\n\r\n",
	"POST /session/{id}/url HTTP/1.1\r\nHost: hub\r\nContent-Length: 002\r\n\r\n{}",
	"POST /session/{id}/url HTTP/1.1\r\nHost: hub\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
	"POST /session/{id}/url HTTP/1.1\r\nHost: hub\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nGET /session/{id}/title HTTP/1.1\r\nHost: hub\r\n\r\n",
	"POST /session/{id}/url HTTP/1.1\r\nHost: hub\r\nContent-Length: 2, 2\r\n\r\n{}",
	"GET /session/{id}/title HTTP/1.1\r\nHost: hub\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\n\r\n",
	"GET /session/{id}/ti%2Ftle HTTP/1.1\r\nHost: hub\r\n\r\n",
	"GET /session/{id}/title HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET /session/{id}/title HTTP/1.1\r\nHost: hub\r\nX-A : b\r\n\r\n",
	"GET /session/{id}/title HTTP/1.1\r\nHost: hub\r\nX-A: b\r\n c\r\n\r\n",
	"GET http://other/session/{id}/title HTTP/1.1\r\nHost: hub\r\n\r\n",
	"GET /session/{id}/title HTTP/1.1\nHost: hub\n\n",
}

// FuzzCommandHead: a request reaches the driver through the hub exactly as
// Go's HTTP server reads it, or not at all (headOracle). {id} in the input
// is replaced by the fixture's session id.
func FuzzCommandHead(f *testing.F) {
	for _, seed := range headSeeds {
		f.Add([]byte(seed))
	}
	check := headOracle(f)
	f.Fuzz(func(t *testing.T, in []byte) { check(t, in) })
}

// The same check over the seeds and 1,000 requests built from the pieces
// parsers decide on (names treated apart, values with spaces, tabs, commas,
// signs, control and high bytes), so that every run covers what random bytes
// reach rarely.
func TestCommandHeadReadAsGoReadsIt(t *testing.T) {
	check := headOracle(t)
	for _, seed := range headSeeds {
		check(t, []byte(seed))
	}
	rng := rand.New(rand.NewPCG(14, 2026))
	often := func(usual string, odd ...string) string {
		if rng.IntN(8) > 0 {
			return usual
		}
		return odd[rng.IntN(len(odd))]
	}
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	value := func(usual string) string {
		var b strings.Builder
		for range 1 + rng.IntN(3) {
			b.WriteString(often(usual, " ", "\t", ",", "+", "-", "0", "close", "keep-alive", "chunked", "é", "\x7f", "\x01", "\r", ":", "[", "#", "a b"))
		}
		return b.String()
	}
	for range 1000 {
		var b strings.Builder
		b.WriteString(often(pick("GET", "POST", "DELETE"), "get", "PUT", "HEAD"))
		b.WriteString(often(" ", "  ", "\t"))
		b.WriteString(often(pick("/session/{id}/url", "/wd/hub/session/{id}/title", "/session/{id}/echo?x=%7e"),
			"/session/{id}/%2e%2e/x", "/session//x", "/session/{id}/a b", "/session/{id}/%zz", "/session/{id}/x#y"))
		b.WriteString(often(" HTTP/1.1", " HTTP/1.0", " http/1.1", "HTTP/1.1", " HTTP/1.1 "))
		host := rng.IntN(6) > 0
		for range rng.IntN(5) {
			name := often(pick("Content-Length", "Connection", "X-A", "Accept"), "content-length", "Host", "Transfer-Encoding",
				"Expect", "Authorization", "Keep-Alive", "Te", "X A", "X-A ", " X-A", "Upgrade", "Trailer")
			usual := map[string]string{"Content-Length": "2", "Connection": "keep-alive"}[name]
			if usual == "" {
				usual = "v"
			}
			b.WriteString("\r\n" + name + often(": ", ":", ":\t", " :") + value(usual))
		}
		if host {
			b.WriteString("\r\nHost: " + often("hub", "", "a b", "[::1]:4444", "h\x01"))
		}
		b.WriteString("\r\n\r\n")
		b.WriteString(pick("", "{}", "{\"url\":\"x\"}", strings.Repeat("z", 80)))
		check(t, []byte(b.String()))
	}
}
