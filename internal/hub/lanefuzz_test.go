package hub

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"
)

// pipeListener hands an http.Server in-memory connections: the fuzz target's
// oracle is Go's own HTTP server, run for real on each input.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *pipeListener) Close() error   { return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// goRead is what Go's HTTP server made of one request.
type goRead struct {
	method, uri string
	length      int64
	close       bool
	header      http.Header
	body        []byte
}

// FuzzLaneHead: a head the lane serves (parseLaneHead) is one Go's HTTP
// server accepts too, and reads the same way: the method, the target as sent,
// the body's length, Connection: close, and the headers the lane passes on to
// the driver. So a lane never serves a request Go's server would refuse, and
// never splits a stream into requests differently from it (no smuggling
// between the two).
func FuzzLaneHead(f *testing.F) {
	id := "0123abcd"
	s := "/session/" + id
	for _, seed := range []string{
		headGet(s + "/title"),
		headPost("/wd/hub"+s+"/url", `{"url":"x"}`),
		"GET " + s + "/echo?b=%7E2 HTTP/1.1\r\nHost: hub\r\nX-Probe: 7\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nAuthorization: Basic dTpw\r\n\r\n",
		"DELETE " + s + "/window HTTP/1.1\r\nhost: [::1]:4444\r\nConnection: close\r\n\r\n",
		"POST " + s + "/url HTTP/1.1\r\nHost: hub\r\nContent-Length: 002\r\n\r\n{}",
		"POST " + s + "/url HTTP/1.1\r\nHost: hub\r\ncontent-length:2\r\nX-Tab:\tv\t\r\n\r\n{}",
		"GET " + s + "/title HTTP/1.1\r\nHost:\r\nX-Obs: caf\xc3\xa9\r\n\r\n",
		"GET " + s + "/title HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET " + s + "/title HTTP/1.1\r\nHost: a b\r\n\r\n",
		"GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nX-A : b\r\n\r\n",
		"GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nX-A: b\r\n c\r\n\r\n",
		"POST " + s + "/url HTTP/1.1\r\nHost: hub\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"POST " + s + "/url HTTP/1.1\r\nHost: hub\r\nContent-Length: 2, 2\r\n\r\n{}",
		"GET " + s + "/title HTTP/1.1\r\nHost: hub\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\n\r\n",
		"GET " + s + "/ti%2Ftle HTTP/1.1\r\nHost: hub\r\n\r\n",
		"GET /session/%30%31/title HTTP/1.1\r\nHost: hub\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	check := goOracle(f)
	f.Fuzz(func(t *testing.T, in []byte) { check(t, in) })
}

// goOracle runs Go's HTTP server on in-memory connections and returns a check
// that whatever head of in the lane serves, Go's server reads the same way.
func goOracle(tb testing.TB) func(t *testing.T, in []byte) {
	reads := make(chan goRead, 1)
	ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reads <- goRead{r.Method, r.RequestURI, r.ContentLength, r.Close, r.Header.Clone(), body}
		w.Header().Set("Connection", "close")
	})}
	go srv.Serve(ln)
	tb.Cleanup(func() { close(ln.done); srv.Close() })
	return func(t *testing.T, in []byte) {
		t.Helper()
		i := bytes.Index(in, []byte("\r\n\r\n"))
		if i < 0 || i+4 > laneMaxHead {
			return
		}
		head := in[:i+4]
		var hd laneHead
		if !parseLaneHead(head, &hd) {
			return
		}
		body := in[len(head):]
		if len(body) < hd.length {
			return // the lane would wait for the rest
		}
		body = body[:hd.length]
		client, server := net.Pipe()
		defer client.Close()
		ln.conns <- server
		client.SetDeadline(time.Now().Add(10 * time.Second))
		go func() { client.Write(append(slices.Clip(head), body...)) }()
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil {
			t.Fatalf("the lane serves %q; Go's server gave no answer: %v", head, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("the lane serves %q; Go's server answers %d", head, resp.StatusCode)
		}
		g := <-reads
		if g.method != hd.method || g.uri != hd.target || g.length != int64(hd.length) || g.close != hd.close || !bytes.Equal(g.body, body) {
			t.Fatalf("%q: the lane reads %s %s length %d close %v; Go's server %s %s length %d close %v",
				head, hd.method, hd.target, hd.length, hd.close, g.method, g.uri, g.length, g.close)
		}
		// What the lane passes on is what Go's server saw, less what is the
		// hub's own (credentials, hop-by-hop, framing).
		fwd, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(slices.Clip(hd.headers), "\r\n"...)))).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("%q: the headers the lane passes on do not parse: %v (%q)", head, err, hd.headers)
		}
		want := http.Header{}
		for k, v := range g.header {
			switch k {
			case "Content-Length", "Authorization", "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate":
			default:
				want[k] = v
			}
		}
		if len(want) != len(fwd) {
			t.Fatalf("%q: the lane passes on %v; Go's server saw %v", head, fwd, want)
		}
		for k, v := range want {
			if !slices.Equal(fwd[k], v) {
				t.Fatalf("%q: header %s: the lane passes on %q; Go's server saw %q", head, k, fwd[k], v)
			}
		}
		if strings.Contains(string(hd.headers), "\n\n") {
			t.Fatalf("%q: the lane's headers hold an empty line", head)
		}
	}
}

// The same check over heads built from the pieces a lane's parser decides on
// (names it treats apart, values with spaces, tabs, commas, signs, control
// and high bytes), so that every run covers what random bytes reach rarely:
// 20,000 heads from a fixed seed.
func TestLaneHeadReadAsGoReadsIt(t *testing.T) {
	check := goOracle(t)
	rng := rand.New(rand.NewPCG(14, 2026))
	// often is mostly its first choice, now and then one of the others.
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
	served := 0
	for range 20000 {
		var b strings.Builder
		b.WriteString(often(pick("GET", "POST", "DELETE"), "get", "PUT", "HEAD"))
		b.WriteString(often(" ", "  ", "\t"))
		b.WriteString(often(pick("/session/0123abcd/url", "/wd/hub/session/0123abcd/title", "/session/0123abcd/echo?x=%7e"),
			"/session/0123abcd/%2e%2e/x", "/session//x", "/session/0123abcd/a b", "/session/0123abcd/%zz", "/session/0123abcd/x#y"))
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
		in := []byte(b.String())
		var hd laneHead
		if i := bytes.Index(in, []byte("\r\n\r\n")); i >= 0 && parseLaneHead(in[:i+4], &hd) {
			served++
		}
		check(t, in)
	}
	if served < 1000 {
		t.Fatalf("only %d of 20,000 heads were ones the lane serves: the check checked little", served)
	}
	t.Logf("%d of 20,000 heads served by the lane, each read the same by Go's server", served)
}
