package hub

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
)

// /logs/: kept files listed, served and removed; /logs/{id}: a live session's
// output over a WebSocket, the socket closing when the session ends.
func TestSessionLogs(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "old-session.log"), []byte("line one\n"), 0o644)
	out := launcher.NewBroadcast()
	l := &stubLauncher{sides: func(e *launcher.Endpoints) { e.Log = out }}
	f := newFixture(t, queue.Options{Limit: 1}, Options{LogDir: dir}, l)
	var names []string
	resp, err := http.Get(f.srv.URL + "/logs/?json")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&names)
	resp.Body.Close()
	if len(names) != 1 || names[0] != "old-session.log" {
		t.Fatalf("listing %v", names)
	}
	if r, err := http.Get(f.srv.URL + "/logs/old-session.log"); err != nil || r.StatusCode != 200 {
		t.Fatalf("file: %v %v", r, err)
	}
	if resp, body := f.do("GET", "/logs/..%2Fx", ""); resp.StatusCode != 400 {
		t.Fatalf("traversal: %d %v", resp.StatusCode, body)
	}
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	out.Write([]byte("driver started\n")) // before anyone follows
	ws, err := websocket.Dial(strings.Replace(f.srv.URL, "http", "ws", 1)+"/logs/"+id, "", "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(time.Minute))
	// From the start, as Selenoid serves a container's output, in binary
	// frames as Selenoid sends them.
	var got strings.Builder
	for i := 0; !strings.Contains(got.String(), "driver says hello\n"); i++ {
		if i == 1 {
			out.Write([]byte("driver says hello\n"))
		}
		fr, err := ws.NewFrameReader()
		if err != nil {
			t.Fatalf("live log after %q: %v", got.String(), err)
		}
		if fr.PayloadType() != websocket.BinaryFrame {
			t.Fatalf("live log frame type %d, want binary (%d)", fr.PayloadType(), websocket.BinaryFrame)
		}
		b, _ := io.ReadAll(fr)
		got.Write(b)
		if i == 0 && got.String() != "driver started\n" {
			t.Fatalf("a follower's first frame %q, want the output written before it came", got.String())
		}
	}
	var msg string
	f.do("DELETE", "/session/"+id, "")
	if err := websocket.Message.Receive(ws, &msg); err == nil {
		t.Fatal("the log socket outlived its session")
	}
	if resp, _ := f.do("DELETE", "/logs/old-session.log", ""); resp.StatusCode != 200 {
		t.Fatal("delete")
	}
	if _, err := os.Stat(filepath.Join(dir, "old-session.log")); err == nil {
		t.Fatal("not deleted")
	}
}

// A live log followed over HTTP/2 and reset by its viewer: the stream's
// writer is let go when the handler returns, and a deadline set on it after
// that, from the viewer's departure, crashed the whole hub (a nil pointer in
// net/http's HTTP/2 writer). Each round resets one stream; the hub must
// still answer after them all.
func TestLiveLogResetOverHTTP2(t *testing.T) {
	out := launcher.NewBroadcast()
	l := &stubLauncher{sides: func(e *launcher.Endpoints) { e.Log = out }}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	srv := httptest.NewUnstartedServer(f.hub)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/logs/"+id, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Fatalf("round %d: %s %d, want HTTP/2 200", i, resp.Proto, resp.StatusCode)
		}
		out.Write([]byte("line\n"))
		cancel() // RST_STREAM
		resp.Body.Close()
	}
	if resp, _ := f.do("GET", "/status", ""); resp.StatusCode != 200 {
		t.Fatalf("status after the resets: %d", resp.StatusCode)
	}
	f.do("DELETE", "/session/"+id, "")
}
