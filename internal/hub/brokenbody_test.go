package hub

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
)

// A command whose body breaks off (cut short by a half-close, malformed
// chunks) is answered 400 invalid argument and its connection closed: Go's
// server cancels the request's context on the broken read, the hub took that
// for a client that left and answered nothing, and the client read the empty
// 200 as the command's success; what came after the broken chunked body was
// then read as requests of their own (a DELETE of the session among them).
func TestBrokenCommandBodies(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	for _, c := range []struct{ name, head, body string }{
		{"short", "Content-Length: 40", `{"url":`},
		{"bad chunk", "Transfer-Encoding: chunked", "zz\r\n{}\r\n0\r\n\r\nDELETE /session/" + id + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"short upload", "Content-Length: 40", `{"file":`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := "/session/" + id + "/url"
			if strings.Contains(c.name, "upload") {
				path = "/session/" + id + "/se/file"
			}
			conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n\r\n%s", path, c.head, c.body)
			conn.(*net.TCPConn).CloseWrite()
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(answer), "invalid argument") || !strings.Contains(string(answer), "broke off") {
				t.Fatalf("%d %q, want 400 invalid argument: the body broke off", resp.StatusCode, answer)
			}
			if !resp.Close {
				t.Error("the connection stays open after a broken body")
			}
			if rest, _ := io.ReadAll(br); len(rest) != 0 {
				t.Errorf("more was answered on the connection: %q", rest)
			}
		})
	}
	if resp, _ := f.do("GET", "/session/"+id+"/url", ""); resp.StatusCode != 200 {
		t.Fatalf("the session did not outlive the broken bodies: %d", resp.StatusCode)
	}
}

// Commands are GET, POST or DELETE, as sent: a driver may take another
// method for one of them (chromedriver takes PUT and "post" for POST), which
// the hub would not check as such. An upload sent with PUT passed none of
// the upload's checks, and a lowercase "delete" of the session quit the
// browser while the hub kept its slot.
func TestCommandMethods(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	for _, c := range []struct{ method, path string }{
		{"PUT", "/session/" + id + "/se/file"},
		{"post", "/session/" + id + "/file"},
		{"Post", "/session/" + id + "/url"},
		{"delete", "/session/" + id},
		{"delete", "/session/" + id + "/window"},
		{"PATCH", "/wd/hub/session/" + id + "/url"},
	} {
		resp, body := f.do(c.method, c.path, `{"file":"UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA=="}`)
		if code, _ := errOf(body); resp.StatusCode != 405 || code != "unknown method" || resp.Header.Get("Allow") != "GET, HEAD, POST, DELETE" {
			t.Errorf("%s %s: %d %v, want 405 unknown method", c.method, c.path, resp.StatusCode, body)
		}
	}
	if resp, _ := f.do("GET", "/session/"+id+"/url", ""); resp.StatusCode != 200 {
		t.Fatalf("the session did not outlive the refused methods: %d", resp.StatusCode)
	}
}
