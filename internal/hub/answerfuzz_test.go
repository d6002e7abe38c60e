package hub

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/websummoner/websummoner/internal/httpserver"
)

// maxInterim is how many interim (1xx) answers Go's Transport reads past
// before it refuses an answer (net/http's max1xxResponses).
const maxInterim = 5

// goAnswer is what Go's HTTP client makes of a driver's answer to a method,
// read straight from the driver: the final status and its body, read past
// interim (1xx) answers (at most maxInterim). ok is false when Go's client
// refuses the answer; stricter is true when Go's reader takes it but the hub
// may refuse it for a reason of its own — a final status below 100 or 101 (no
// client of the hub asked for an upgrade), more interim answers than the
// Transport reads past, a version other than HTTP/1.x, a status line longer
// than a 4 KiB read buffer. loose is true when Go's refusal is about the
// trailer section after a chunked body, which depends on how much of the
// trailer a reader's buffer happens to hold.
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

// relayOracle returns a check that what a client reads through the hub of a
// driver's answer to a command is what Go's client reads of that answer
// straight from the driver, or the hub's own 500, or an answer cut off with its
// connection closed; and that a connection the hub keeps open is in step: its
// next command gets its own answer. first says whether the command is the
// connection's first.
func relayOracle(lf *connFixture) func(t testing.TB, raw []byte, method string, first bool) {
	s := "/session/" + lf.id
	return func(t testing.TB, raw []byte, method string, first bool) {
		t.Helper()
		rc := lf.dial(t)
		defer rc.c.Close()
		if !first {
			rc.send(headGet(s + "/title"))
			rc.answer()
		}
		rc.send(method + " " + s + "/title?raw=" + url.QueryEscape(string(raw)) + " HTTP/1.1\r\nHost: hub\r\nContent-Length: 0\r\n\r\n")
		status, body, ok, stricter, loose := goAnswer(raw, method)
		// As every HTTP client does, read past interim answers the hub relays.
		resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
		for n := 0; err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols && n < maxInterim; n++ {
			resp, err = http.ReadResponse(rc.br, &http.Request{Method: method})
		}
		var got []byte
		if err == nil {
			got, err = io.ReadAll(resp.Body)
		}
		whole := err == nil
		where := fmt.Sprintf("%s answered %q (first %v)", method, raw, first)
		switch {
		case loose:
		case whole && ok && !stricter:
			if resp.StatusCode != status || !bytes.Equal(got, body) {
				t.Errorf("%s: the client reads %d %q; Go's client reads the driver's %d %q", where, resp.StatusCode, got, status, body)
			}
		case whole && !hubMade(method, resp.StatusCode, got) && !(ok && resp.StatusCode == status && bytes.Equal(got, body)):
			t.Errorf("%s: the client reads %d %q; Go's client refuses the driver's answer, so the hub's own 500 or a cut-off answer", where, resp.StatusCode, got)
		case !whole && ok && !stricter:
			t.Errorf("%s: the client's answer broke off (%v); Go's client reads the driver's %d %q", where, err, status, body)
		}
		if !whole || resp.Close {
			return // the connection is to end
		}
		rc.send(headGet(s + "/title"))
		// Bytes a driver sends after its answer are read as the start of its
		// next answer, which then is the hub's 500 in the driver's own session; what
		// must never happen is a client taking them for an answer.
		if next, b := rc.answer(); !(next.StatusCode == 200 && b == `{"value":"wdstub"}`+"\n") &&
			!(next.StatusCode == http.StatusInternalServerError && strings.Contains(b, "malformed HTTP")) {
			t.Errorf("%s: the next command on the connection gets %d %q", where, next.StatusCode, b)
		}
	}
}

// FuzzDriverAnswer: the hub relays a driver's answer to a command whole only
// when Go's HTTP client would read it, and then with the same status and
// body — a hostile or broken driver cannot make the hub frame an answer
// differently from the clients behind it. The first byte picks the method
// and whether the command is its connection's first.
func FuzzDriverAnswer(f *testing.F) {
	for _, seed := range driverAnswerSeeds {
		f.Add([]byte("P" + seed))
	}
	f.Add([]byte("H" + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"))
	f.Add([]byte("G" + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
	lf, _ := newConnFixture(f, httpserver.Options{})
	check := relayOracle(lf)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return // no answer: the driver gives the stub's own
		}
		check(t, in[1:], fuzzMethod(in[0]), in[0]&4 == 0)
	})
}

func fuzzMethod(b byte) string {
	return [...]string{"POST", "GET", "HEAD", "DELETE"}[b%4]
}

// driverAnswerSeeds are answers where a parser's corners are: framing two ways,
// lengths with signs, versions and status lines just off the mark.
var driverAnswerSeeds = []string{
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

// FuzzDriverAnswer's check on its seeds, for every method, as a connection's
// first command and a later one, and on 400 answers put together from their
// parts (status lines, framing headers, bodies, interim answers) at random, so
// that make test, which runs no fuzzer, still walks the corners in
// combination.
func TestHubRelaysAnswersAsGoReadsThem(t *testing.T) {
	lf, _ := newConnFixture(t, httpserver.Options{})
	check := relayOracle(lf)
	for _, seed := range driverAnswerSeeds {
		for m := range byte(4) {
			check(t, []byte(seed), fuzzMethod(m), m%2 == 0)
		}
	}
	rng := rand.New(rand.NewPCG(14, 400))
	for _, a := range genAnswers(rng, 400) {
		check(t, []byte(a), fuzzMethod(byte(rng.IntN(4))), rng.IntN(2) == 0)
	}
}

// hubMade reports the hub's own answer to a driver that did not answer: 500
// unknown error saying so (no body to a HEAD).
func hubMade(method string, status int, body []byte) bool {
	return status == http.StatusInternalServerError && (bytes.Contains(body, []byte("did not answer")) || method == http.MethodHead && len(body) == 0)
}
