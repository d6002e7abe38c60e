package hub

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// BenchmarkProxyCommand is one command through the hub's handler to a local stub
// driver, against the same command straight to the stub (the baseline).
func BenchmarkProxyCommand(b *testing.B) {
	f := newFixture(b, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	defer f.srv.Close()
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	var driver string
	f.l.mu.Lock()
	for i := range f.l.live {
		driver = i.srv.URL
	}
	f.l.mu.Unlock()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	run := func(b *testing.B, url string) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Get(url)
			if err != nil || resp.StatusCode != 200 {
				b.Fatal(err, resp)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, driver+"/session/"+id+"/title") })
	b.Run("hub", func(b *testing.B) { run(b, f.srv.URL+"/wd/hub/session/"+id+"/title") })
	f.sess.EndAll("shutdown")
}

// BenchmarkProxyHandler is the hub's handler alone (no client socket): what the
// hub adds per command, allocations included.
func BenchmarkProxyHandler(b *testing.B) {
	f := newFixture(b, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	defer f.srv.Close()
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	req := httptest.NewRequest("GET", "/wd/hub/session/"+id+"/title", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		f.hub.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
	f.sess.EndAll("shutdown")
}

func BenchmarkParseCapabilities(b *testing.B) {
	body := []byte(`{"capabilities":{"firstMatch":[{}],"alwaysMatch":{"browserName":"chrome","browserVersion":"128","pageLoadStrategy":"normal",
		"goog:chromeOptions":{"args":["--headless","--no-sandbox"],"extensions":[]},"selenoid:options":{"name":"t","sessionTimeout":"2m","env":["A=1"]}}}}`)
	b.ReportAllocs()
	for b.Loop() {
		n, err := webdriver.ParseNewSession(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := n.Candidates(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSessionLookup(b *testing.B) {
	f := newFixture(b, queue.Options{Limit: 50}, Options{}, &stubLauncher{})
	defer f.srv.Close()
	var ids []string
	for range 50 {
		_, body := f.do("POST", "/session", w3cChrome)
		ids = append(ids, body["value"].(map[string]any)["sessionId"].(string))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s, ok := f.sess.Begin(ids[i%len(ids)])
		if !ok {
			b.Fatal("missing")
		}
		f.sess.Done(s)
		i++
	}
	f.sess.EndAll("shutdown")
}
