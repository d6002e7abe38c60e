package hub

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/websummoner/websummoner/internal/httpserver"
)

// goAnswer is what Go's HTTP client makes of a driver's answer to a method:
// the final status and its body, read past interim (1xx) answers as the hub
// reads past them (at most maxInterim). ok is false when Go's client refuses
// the answer; stricter is true when Go takes it but the hub may refuse it for
// a reason of its own — a final status below 100 or 101 (no client of the hub
// asked for an upgrade), more interim answers than the hub reads past, a
// version other than HTTP/1.x, a status line longer than the hub's 4 KiB
// read buffer. loose is true when Go's refusal is about the trailer section
// after a chunked body, which the hub throws away (its rule there, a CRLF or
// headers ended by an empty line, is textproto's; Go's depends on how much
// of the trailer its buffer happens to hold).
func goAnswer(in []byte, method string) (status int, body []byte, ok, stricter, loose bool) {
	if i := bytes.IndexByte(in, '\n'); i < 0 || i >= 4096 {
		stricter = true
	}
	br := bufio.NewReader(bytes.NewReader(in))
	req := &http.Request{Method: method}
	for interim := 0; ; interim++ {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return 0, nil, false, stricter, false
		}
		if resp.ProtoMajor != 1 || resp.StatusCode < 100 || resp.StatusCode == http.StatusSwitchingProtocols {
			stricter = true
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			if interim == maxInterim {
				return 0, nil, false, true, false
			}
			continue
		}
		body, err = io.ReadAll(resp.Body)
		if err != nil {
			return 0, nil, false, stricter, strings.Contains(err.Error(), "trailer")
		}
		return resp.StatusCode, body, true, stricter, false
	}
}

// wireOracle is a driver that answers each command with the bytes it is
// given and closes the connection, and a check that the wire relays an
// answer whole exactly when Go's client reads it, with the status and body
// Go's client reads.
func wireOracle(tb testing.TB) func(t *testing.T, answer []byte, method string) {
	var next atomic.Pointer[[]byte]
	host, _ := serveRequests(tb, func(c net.Conn, _ *http.Request, _ []byte) bool {
		c.Write(*next.Load())
		return false
	})
	return func(t *testing.T, answer []byte, method string) {
		t.Helper()
		next.Store(&answer)
		wr := newWire() // a connection of its own: an answer read short is not the next one's
		rec, err, aborted := wireDo(t, wr, host, method)
		wr.closeIdle(host)
		whole := err == nil && !aborted
		status, body, ok, stricter, loose := goAnswer(answer, method)
		switch {
		case loose:
		case whole && !ok:
			t.Errorf("%s answered %q: the hub relays %d %q; Go's client refuses it", method, answer, rec.Code, rec.Body.Bytes())
		case whole && (rec.Code != status || !bytes.Equal(rec.Body.Bytes(), body)):
			t.Errorf("%s answered %q: the hub relays %d %q; Go's client reads %d %q", method, answer, rec.Code, rec.Body.Bytes(), status, body)
		case !whole && ok && !stricter:
			t.Errorf("%s answered %q: the hub refuses it (%v, aborted %v); Go's client reads %d %q", method, answer, err, aborted, status, body)
		}
	}
}

// FuzzWireAnswer: the hub relays a driver's answer to a command whole only
// when Go's HTTP client would read it, and then with the same status and
// body — a hostile or broken driver cannot make the hub frame an answer
// differently from the clients behind it. The first byte picks the method.
func FuzzWireAnswer(f *testing.F) {
	for _, seed := range wireAnswerSeeds {
		f.Add([]byte("P" + seed))
	}
	f.Add([]byte("H" + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"))
	f.Add([]byte("G" + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
	check := wireOracle(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		check(t, in[1:], fuzzMethod(in[0]))
	})
}

func fuzzMethod(b byte) string {
	return [...]string{"POST", "GET", "HEAD", "DELETE"}[b%4]
}

// wireAnswerSeeds are answers where a parser's corners are: framing two ways,
// lengths with signs, versions and status lines just off the mark.
var wireAnswerSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x",
	"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nContent-Length: -0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
	"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.0 200 OK\r\n\r\n{\"value\":null}",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: 1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\n{}\r\n0\r\n\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: gzip\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 100 Continue\r\nContent-Length: x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 103 Early Hints\r\nTransfer-Encoding: gzip\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 101 Switching Protocols\r\n\r\n",
	"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 099 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 +20 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200\tOK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200\r\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.x 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.10 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.5 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1x200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
	"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\n Content-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n{}",
	"HTTP/1.1 999 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{}",
}

// TestWireReadsAnswersAsGoReadsThem runs FuzzWireAnswer's check on its seeds
// and on 3,000 answers put together from their parts (status lines, framing
// headers, bodies, interim answers) at random, so that make test, which runs
// no fuzzer, still walks the corners in combination.
func TestWireReadsAnswersAsGoReadsThem(t *testing.T) {
	check := wireOracle(t)
	for _, seed := range wireAnswerSeeds {
		for m := range byte(4) {
			check(t, []byte(seed), fuzzMethod(m))
		}
	}
	rng := rand.New(rand.NewPCG(14, 3000))
	for _, a := range genAnswers(rng, 3000) {
		check(t, []byte(a), fuzzMethod(byte(rng.IntN(4))))
	}
}

// genAnswers puts n driver answers together from parts where parsers differ:
// interim answers, status lines, framing headers and bodies, at random.
func genAnswers(rng *rand.Rand, n int) []string {
	statuses := []string{"HTTP/1.1 200 OK", "HTTP/1.0 200 OK", "HTTP/1.1 404 Not Found", "HTTP/1.1 204 No Content",
		"HTTP/1.1 304 Not Modified", "HTTP/1.1 500", "HTTP/1.1 200 ", "HTTP/1.1 200\r", "HTTP/1.1 2000 OK", "HTTP/1.1 20 X",
		"HTTP/1.2 200 OK", "HTTP/1.x 200 OK", "HTTP/2.0 200 OK", "HTTP/1.1 -20 X", "HTTP/1.1 099 X", "HTTP/1.1 101 X"}
	interims := []string{"", "HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
		"HTTP/1.1 100 Continue\r\nContent-Length: z\r\n\r\n", "HTTP/1.1 102 Processing\r\nTransfer-Encoding: gzip\r\n\r\n"}
	framing := []string{"Content-Length: 2", "Content-Length: 02", "Content-Length: +2", "Content-Length: 3", "Content-Length: 0",
		"Content-Length:", "Content-Length: 2, 2", "Transfer-Encoding: chunked", "Transfer-Encoding: CHUNKED",
		"Transfer-Encoding: gzip", "Transfer-Encoding: gzip, chunked", "Transfer-Encoding: chunked, gzip", "Transfer-Encoding:",
		"Connection: close", "Connection: keep-alive", "X-Other: 1", "Trailer: X-T"}
	bodies := []string{"", "{}", "{}xyz", "2\r\n{}\r\n0\r\n\r\n", "2\r\n{}\r\n0\r\nX-T: 1\r\n\r\n", "2\r\n{}\r\n0\r\n",
		"2\r\n{}\r\n0\r\n\n", "z\r\n{}\r\n0\r\n\r\n", "2\r\n{}", "1\r\n{\r\n1\r\n}\r\n0\r\n\r\n"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	var out []string
	for range n {
		var b strings.Builder
		for range rng.IntN(3) {
			b.WriteString(pick(interims))
		}
		b.WriteString(pick(statuses) + "\r\n")
		for range rng.IntN(4) {
			b.WriteString(pick(framing) + "\r\n")
		}
		b.WriteString("\r\n" + pick(bodies))
		out = append(out, b.String())
	}
	return out
}

// What a client reads through the hub of a driver's answer is what Go's
// client reads of that answer straight from the driver, or the hub's 502, or
// an answer cut off with its connection closed — through Go's server (a
// connection's first command) and through a lane (its next ones) alike; and a
// connection the hub keeps open is in step: its next command gets its own
// answer. Answers: FuzzWireAnswer's seeds and 400 put together at random.
func TestHubRelaysAnswersAsGoReadsThem(t *testing.T) {
	lf, _ := newLaneFixture(t, httpserver.Options{})
	s := "/session/" + lf.id
	answers := append([]string(nil), wireAnswerSeeds...)
	answers = append(answers, genAnswers(rand.New(rand.NewPCG(14, 400)), 400)...)
	for i, raw := range answers {
		for _, viaLane := range []bool{false, true} {
			rc := lf.dial(t)
			if viaLane {
				rc.send(headGet(s + "/title"))
				rc.answer()
			}
			rc.send(headGet(s + "/title?raw=" + url.QueryEscape(raw)))
			status, body, ok, stricter, loose := goAnswer([]byte(raw), http.MethodGet)
			resp, err := http.ReadResponse(rc.br, &http.Request{Method: http.MethodGet})
			var got []byte
			if err == nil {
				got, err = io.ReadAll(resp.Body)
			}
			whole := err == nil
			where := fmt.Sprintf("answer %d %q (lane %v)", i, raw, viaLane)
			switch {
			case loose:
			case whole && ok && !stricter:
				if resp.StatusCode != status || !bytes.Equal(got, body) {
					t.Errorf("%s: the client reads %d %q; Go's client reads the driver's %d %q", where, resp.StatusCode, got, status, body)
				}
			case whole && resp.StatusCode != http.StatusBadGateway:
				t.Errorf("%s: the client reads %d %q; Go's client refuses the driver's answer (or the hub may), so a 502 or a cut-off answer", where, resp.StatusCode, got)
			case !whole && ok && !stricter:
				t.Errorf("%s: the client's answer broke off (%v); Go's client reads the driver's %d %q", where, err, status, body)
			}
			if !whole || resp.Close {
				continue // the connection is to end
			}
			rc.send(headGet(s + "/title"))
			if next, b := rc.answer(); next.StatusCode != 200 || b != `{"value":"wdstub"}`+"\n" {
				t.Errorf("%s: the next command on the connection gets %d %q", where, next.StatusCode, b)
			}
		}
	}
}
