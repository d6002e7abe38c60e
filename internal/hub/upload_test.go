package hub

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/websummoner/websummoner/internal/queue"
)

// zipOf is a zip of the named contents, deflated, as Selenium makes one.
func zipOf(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, data := range files {
		f, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// lyingZip is a zip of one deflated entry of n zero bytes whose headers
// declare 10 bytes, compressed and not.
func lyingZip(t *testing.T, n int) []byte {
	t.Helper()
	var deflated bytes.Buffer
	fw, _ := flate.NewWriter(&deflated, flate.BestCompression)
	zeros := make([]byte, n)
	fw.Write(zeros)
	fw.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "small.txt", Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(zeros),
		CompressedSize64: 10, UncompressedSize64: 10})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(deflated.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func uploadBody(zipped []byte) string {
	return `{"file":"` + base64.StdEncoding.EncodeToString(zipped) + `"}`
}

// A zip's decompressed size is bounded by -max-upload-size, counting the bytes
// that come out (not what the headers declare) and stopping just past the
// limit; a zip of many entries is refused; and so is what is not strictly a
// JSON object of base64 zips: a laxer JSON reader behind (Chromium's takes
// comments) would unpack a zip the check never saw.
func TestCheckUploadBody(t *testing.T) {
	const limit = 1 << 20
	bomb := zipOf(t, map[string][]byte{"a.txt": make([]byte, 64<<20)})
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb is %d bytes, not a small zip", len(bomb))
	}
	many := map[string][]byte{}
	for i := range maxUploadEntries + 1 {
		many[fmt.Sprintf("f%d.txt", i)] = []byte("x")
	}
	small := base64.StdEncoding.EncodeToString(zipOf(t, map[string][]byte{"s.txt": []byte("s")}))
	split := map[string][]byte{}
	for i := range 4 {
		split[fmt.Sprintf("part%d.bin", i)] = make([]byte, limit/3)
	}
	for _, c := range []struct {
		name, body string
		tooLarge   bool
		refused    string // an error containing this, when not tooLarge
	}{
		{name: "bomb", body: uploadBody(bomb), tooLarge: true},
		{name: "headers lie", body: uploadBody(lyingZip(t, 4<<20)), tooLarge: true},
		{name: "entries add up", body: uploadBody(zipOf(t, split)), tooLarge: true},
		{name: "file key in another case", body: `{"file":"` + small + `","FILE":"` + base64.StdEncoding.EncodeToString(bomb) + `"}`, tooLarge: true},
		{name: "duplicate file key", body: `{"file":"` + base64.StdEncoding.EncodeToString(bomb) + `","file":"` + small + `"}`, tooLarge: true},
		{name: "many entries", body: uploadBody(zipOf(t, many)), refused: "65 entries"},
		{name: "one file", body: uploadBody(zipOf(t, map[string][]byte{"a.txt": make([]byte, limit)}))},
		{name: "a few files", body: uploadBody(zipOf(t, map[string][]byte{"a.txt": []byte("a"), "b.txt": []byte("b")}))},
		{name: "not JSON", body: "PK\x03\x04", refused: "not valid JSON"},
		{name: "not an object", body: `["file"]`, refused: "not a JSON object"},
		{name: "not base64", body: `{"file":"%%%"}`, refused: "not standard base64"},
		{name: "not a zip", body: `{"file":"UEsDBA=="}`, refused: "not a zip"},
		{name: "file not a string", body: `{"file":{"a":1}}`, refused: "not a string"},
		{name: "no file", body: `{"files":"UEsDBA=="}`, refused: `no "file" member`},
		{name: "a comment before the file", body: `{/*c*/"file":"` + base64.StdEncoding.EncodeToString(bomb) + `"}`, refused: "not valid JSON"},
		{name: "an empty member before the file", body: `{"x":1,,"file":"` + base64.StdEncoding.EncodeToString(bomb) + `"}`, refused: "not valid JSON"},
		{name: "a leading zero before the file", body: `{"x":01,"file":"` + base64.StdEncoding.EncodeToString(bomb) + `"}`, refused: "not valid JSON"},
		{name: "a raw tab before the file", body: "{\"x\":\"a\tb\",\"file\":\"" + base64.StdEncoding.EncodeToString(bomb) + `"}`, refused: "not valid JSON"},
		{name: "an escaped key", body: `{"\u0066ile":"` + base64.StdEncoding.EncodeToString(bomb) + `"}`, tooLarge: true},
	} {
		n, err := checkUploadBody([]byte(c.body), limit)
		switch {
		case c.tooLarge:
			if !errors.Is(err, errUploadTooLarge) {
				t.Errorf("%s: err = %v, want the decompressed size refused", c.name, err)
			}
			if n != limit+1 {
				t.Errorf("%s: %d bytes decompressed; the check must stop just past the limit (%d)", c.name, n, limit+1)
			}
		case c.refused != "":
			if err == nil || errors.Is(err, errUploadTooLarge) || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("%s: err = %v, want a refusal containing %q", c.name, err, c.refused)
			}
		case err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		}
	}
}

// Through the hub: a zip bomb under -max-upload-size is 413 naming the flag and
// the decompressed size, and never reaches the driver; an upload that passes
// reaches the driver byte for byte as the client sent it, with its length or
// chunked.
func TestUploadDecompressedSizeBounded(t *testing.T) {
	got := make(chan []byte, 8)
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/file") {
				data, err := io.ReadAll(r.Body)
				if err != nil {
					t.Errorf("the driver's read of the upload: %v", err)
				}
				got <- data
				r.Body = io.NopCloser(bytes.NewReader(data))
			}
			h.ServeHTTP(w, r)
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{MaxUploadSize: 1 << 20}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)

	bomb := uploadBody(zipOf(t, map[string][]byte{"a.txt": make([]byte, 8<<20)}))
	resp, body := f.do("POST", "/session/"+id+"/se/file", bomb)
	if code, msg := errOf(body); resp.StatusCode != 413 || code != "invalid argument" ||
		!strings.Contains(msg, "-max-upload-size 1 MiB") || !strings.Contains(msg, "decompressed size") {
		t.Fatalf("zip bomb: %d %q %q", resp.StatusCode, code, msg)
	}
	select {
	case data := <-got:
		t.Fatalf("the driver got a refused upload of %d bytes", len(data))
	default:
	}

	// Not compact JSON, odd spacing and an extra member: what the driver gets is
	// exactly this, not a re-encoding.
	zipped := zipOf(t, map[string][]byte{"report.txt": []byte("hello, driver")})
	sent := "{ \"file\" :\n\"" + base64.StdEncoding.EncodeToString(zipped) + "\", \"extra\": [1, 2.50] }"
	for _, chunked := range []bool{false, true} {
		var src io.Reader = strings.NewReader(sent)
		if chunked {
			src = io.MultiReader(src) // no length known: sent chunked
		}
		req, _ := http.NewRequest("POST", f.srv.URL+"/session/"+id+"/se/file", src)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("chunked=%v: %d %s", chunked, r.StatusCode, answer)
		}
		if data := <-got; !bytes.Equal(data, []byte(sent)) {
			t.Fatalf("chunked=%v: the driver got %q, the client sent %q", chunked, data, sent)
		}
	}
	if f.sess.Len() != 1 {
		t.Fatal("a refused upload ended the session")
	}
}

// The file uploads the hub holds in memory at once are bounded: past
// uploadBudget uploads of -max-upload-size that their driver has not read,
// the next waits for a turn, for uploadWait at most, then is told to retry
// (500, Retry-After); none is lost. In fake time, so that "waits" is a
// fact, not a timing margin.
func TestUploadsHeldAtOnceAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, id, arrived, release := uploadFixture(t, false)
		upload := bigUpload(t)
		type answer struct {
			code  int
			retry string
		}
		answers := make(chan answer, uploadBudget+1)
		for range uploadBudget + 1 {
			go func() {
				resp, _ := f.do("POST", "/session/"+id+"/se/file", upload)
				answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
			}()
		}
		synctest.Wait()
		if n := arrived.Load(); n != uploadBudget {
			t.Fatalf("%d uploads of %d KiB reached the driver at once, want %d (a budget of %d MiB)", n, len(upload)>>10, uploadBudget, uploadBudget)
		}
		time.Sleep(uploadWait)
		synctest.Wait()
		if a := <-answers; a.code != http.StatusInternalServerError || a.retry == "" {
			t.Fatalf("an upload that found no turn within %v: %+v, want 500 and Retry-After", uploadWait, a)
		}
		release()
		for range uploadBudget {
			if a := <-answers; a.code != 200 {
				t.Errorf("an upload answered %+v", a)
			}
		}
	})
}

// An upload's share of the budget goes back once its driver has read it,
// not when the driver answers: a driver busy with the session's earlier
// command answers later, and must not hold everyone else's uploads.
func TestUploadBudgetReturnsOnceTheDriverHasTheBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, id, arrived, release := uploadFixture(t, true)
		upload := bigUpload(t)
		codes := make(chan int, 2*uploadBudget)
		for range 2 * uploadBudget {
			go func() {
				resp, _ := f.do("POST", "/session/"+id+"/se/file", upload)
				codes <- resp.StatusCode
			}()
		}
		synctest.Wait()
		if n := arrived.Load(); n != 2*uploadBudget {
			t.Fatalf("%d of %d uploads reached a driver that read them and has not answered, want all", n, 2*uploadBudget)
		}
		release()
		for range 2 * uploadBudget {
			if code := <-codes; code != 200 {
				t.Errorf("an upload answered %d", code)
			}
		}
	})
}

// uploadFixture is a session on an in-memory driver whose uploads count in
// arrived and wait for release before the driver answers; readFirst says
// whether the driver reads the upload before it waits.
func uploadFixture(t *testing.T, readFirst bool) (f *fixture, id string, arrived *atomic.Int32, release func()) {
	arrived = new(atomic.Int32)
	gate := make(chan struct{})
	release = sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // a failed check leaves no upload blocked in the bubble
	l := &stubLauncher{mem: newMemTransport(), wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/file") {
				if readFirst {
					data, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(data))
				}
				arrived.Add(1)
				<-gate
			}
			h.ServeHTTP(w, r)
		})
	}}
	f = newFixture(t, queue.Options{Limit: 1}, Options{MaxUploadSize: 1 << 20}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	return f, body["value"].(map[string]any)["sessionId"].(string), arrived, release
}

// bigUpload is most of a MiB, with a length: four fit in the budget of a
// -max-upload-size of 1 MiB, five do not.
func bigUpload(t *testing.T) string {
	return `{"file":"` + base64.StdEncoding.EncodeToString(zipOf(t, map[string][]byte{"a.txt": []byte("a")})) +
		`","pad":"` + strings.Repeat("x", 900<<10) + `"}`
}

// Go's Transport sends an upload again from its start (GetBody) when a kept
// connection to the driver turns out closed before anything was written,
// after closing the first reading: the bytes stay until the request is
// written whole, and only then are they let go and the budget's share given
// back.
func TestSentBodyResendsUntilWritten(t *testing.T) {
	var given atomic.Int32
	b := &sentBody{data: []byte("the client's bytes"), sent: sync.OnceFunc(func() { given.Add(1) })}
	first := b.reader()
	first.Read(make([]byte, 4))
	first.Close() // as the Transport's rewind does
	again, err := b.again()
	if err != nil {
		t.Fatalf("GetBody after the first reading was closed: %v", err)
	}
	if data, _ := io.ReadAll(again); string(data) != "the client's bytes" || given.Load() != 0 {
		t.Fatalf("resent %q, share given back %d times before the request was written", data, given.Load())
	}
	b.written()
	b.written()
	if given.Load() != 1 {
		t.Fatalf("share given back %d times, want once", given.Load())
	}
	if _, err := b.again(); err == nil {
		t.Fatal("GetBody after the request was written whole: the bytes were kept")
	}
}

// Through the hub's own Transport and real sockets, an upload's share goes
// back once the request is written whole (the Transport's WroteRequest), not
// when its driver answers: 2 × uploadBudget uploads all reach drivers that
// have read them and not answered.
func TestUploadBudgetReturnsWhenWritten(t *testing.T) {
	arrived := make(chan struct{}, 2*uploadBudget)
	gate := make(chan struct{})
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/file") {
				data, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(data))
				arrived <- struct{}{}
				<-gate
			}
			h.ServeHTTP(w, r)
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{MaxUploadSize: 1 << 20}, l)
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // before the fixture's servers close, which wait for their handlers
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	upload := bigUpload(t)
	codes := make(chan int, 2*uploadBudget)
	for range 2 * uploadBudget {
		go func() {
			req, _ := http.NewRequest("POST", f.srv.URL+"/session/"+id+"/se/file", strings.NewReader(upload))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	for i := range 2 * uploadBudget {
		select {
		case <-arrived:
		case code := <-codes:
			t.Fatalf("an upload answered %d before its driver had it", code)
		case <-time.After(time.Minute): // a bound for a hang, not a margin
			t.Fatalf("%d of %d uploads reached drivers that read them and had not answered: the others wait for the budget", i, 2*uploadBudget)
		}
	}
	release()
	for range 2 * uploadBudget {
		if code := <-codes; code != 200 {
			t.Errorf("an upload answered %d", code)
		}
	}
}

// A body sent without its length (chunked over HTTP/1.1, or HTTP/2 without
// Content-Length) reaches the driver with its length: chromedriver drops a
// chunked request unanswered, which the client saw as a 500. A command's is
// read whole, its first 64 KiB freely and up to MaxNewSessionBody within a
// share of the read budget, then refused with a W3C 413; an
// upload's, checked whole anyway, is sent on with the length it has.
func TestUnsizedBodiesReachTheDriverSized(t *testing.T) {
	type got struct {
		path string
		cl   int64
		body string
	}
	reached := make(chan got, 4)
	l := &stubLauncher{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || !strings.Contains(r.URL.Path, "/session/") {
				h.ServeHTTP(w, r)
				return
			}
			if len(r.TransferEncoding) > 0 || r.ContentLength < 0 { // as chromedriver: no answer
				c, _, _ := http.NewResponseController(w).Hijack()
				c.Close()
				return
			}
			b, _ := io.ReadAll(r.Body)
			reached <- got{r.URL.Path, r.ContentLength, string(b)}
			fmt.Fprint(w, `{"value":null}`)
		})
	}}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	chunked := func(path, body string) (*http.Response, map[string]any) {
		// A reader of unknown length: Go's client sends it chunked.
		req, _ := http.NewRequest("POST", f.srv.URL+path, io.MultiReader(strings.NewReader(body)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp, v
	}
	cmd := `{"url":"http://127.0.0.1/"}`
	if resp, v := chunked("/session/"+id+"/url", cmd); resp.StatusCode != 200 {
		t.Fatalf("chunked command: %d %v", resp.StatusCode, v)
	}
	if g := <-reached; g.cl != int64(len(cmd)) || g.body != cmd {
		t.Fatalf("the driver got %+v, want the body with its length %d", g, len(cmd))
	}
	up := uploadBody(zipOf(t, map[string][]byte{"a.txt": []byte("a")}))
	if resp, v := chunked("/session/"+id+"/se/file", up); resp.StatusCode != 200 {
		t.Fatalf("chunked upload: %d %v", resp.StatusCode, v)
	}
	if g := <-reached; !strings.HasSuffix(g.path, "/file") || g.cl != int64(len(up)) {
		t.Fatalf("the driver got %+v, want the upload with its length %d", g, len(up))
	}
	// Past the first 64 KiB, within a share of the read budget (a script
	// library such as axe-core is half a megabyte).
	big := `{"script":"return 1","args":["` + strings.Repeat("x", 512<<10) + `"]}`
	if resp, v := chunked("/session/"+id+"/execute/sync", big); resp.StatusCode != 200 {
		t.Fatalf("a large chunked command: %d %v", resp.StatusCode, v)
	}
	if g := <-reached; g.cl != int64(len(big)) {
		t.Fatalf("the driver got %d bytes as its length, want %d", g.cl, len(big))
	}
	huge := `{"script":"return 1","args":["` + strings.Repeat("x", MaxNewSessionBody) + `"]}`
	resp, v := chunked("/session/"+id+"/execute/sync", huge)
	if e, m := errOf(v); resp.StatusCode != http.StatusRequestEntityTooLarge || e != "invalid argument" || !strings.Contains(m, "Content-Length") {
		t.Fatalf("chunked command over the bound: %d %v", resp.StatusCode, v)
	}
	select {
	case g := <-reached:
		t.Fatalf("the refused command reached the driver: %s", g.path)
	default:
	}
	// Every share of the read budget came back.
	if give := f.hub.reads.tryTake("", readBudget); give == nil {
		t.Fatal("the read budget is still held")
	} else {
		give()
	}
	f.do("DELETE", "/session/"+id, "")
}
