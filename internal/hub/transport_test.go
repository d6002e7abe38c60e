package hub

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
)

// With 1,100 drivers live at once, each used in turn (as 1,100 sessions'
// commands are), every driver keeps its connection: a second round of
// commands opens none.
func TestTransportKeepsEveryDriversConnection(t *testing.T) {
	const drivers = 1100
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"value":null}`) }),
	}
	defer srv.Close()
	hosts := make([]string, drivers)
	for i := range hosts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		hosts[i] = ln.Addr().String()
	}
	// Dials are counted where the Transport makes them: the listeners' own
	// count would also see other test processes' probes of ports these
	// listeners happen to reuse.
	var dials atomic.Int32
	var d net.Dialer
	tr := NewTransport(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for round := range 2 {
		for _, h := range hosts {
			resp, err := client.Get("http://" + h + "/session/s/title")
			if err != nil {
				t.Fatalf("round %d, %s: %v", round, h, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if n := dials.Load(); n != drivers {
			t.Fatalf("after round %d: %d connections to %d drivers, want one each", round, n, drivers)
		}
	}
}

// A command's answer of known length is not flushed on its way through: it
// leaves the hub in one write, headers and body together, when the handler
// returns, rather than as headers first and body after (a write and a client
// wake-up more per command).
func TestCommandAnswerIsNotFlushedApart(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	defer f.sess.EndAll("shutdown")
	rec := httptest.NewRecorder()
	f.hub.ServeHTTP(rec, httptest.NewRequest("GET", "/wd/hub/session/"+id+"/title", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Length") == "" {
		t.Fatalf("title: status %d, Content-Length %q, body %s: want 200 with a length", rec.Code, rec.Header().Get("Content-Length"), rec.Body)
	}
	if rec.Flushed {
		t.Fatal("the answer was flushed while it was copied: its headers leave apart from its body")
	}
}
