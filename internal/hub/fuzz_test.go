package hub

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
)

// FuzzSessionPath: whatever the method and path, the hub answers JSON, never
// panics, never forwards a path with a dot segment, and never ends the live
// session except through its own DELETE.
func FuzzSessionPath(f *testing.F) {
	forwarded := make(chan string, 1)
	l := &stubLauncher{mem: newMemTransport(), wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case forwarded <- r.URL.EscapedPath():
			default:
			}
			h.ServeHTTP(w, r)
		})
	}}
	fx := newFixture(f, queue.Options{Limit: 1}, Options{}, l)
	_, body := fx.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	<-forwarded
	for _, seed := range []string{"/session/" + id + "/url", "/wd/hub/session/" + id + "/%2e%2e/%2e%2e/status", "//session", "/session/" + id + "/", "/wd/hub/status", "/session/%zz/x"} {
		f.Add(uint8(0), seed)
	}
	methods := []string{"GET", "POST", "DELETE", "PUT", "HEAD"}
	f.Fuzz(func(t *testing.T, m uint8, path string) {
		method := methods[int(m)%len(methods)]
		if method == "DELETE" && strings.Contains(path, id) || method == "POST" && strings.HasSuffix(strings.TrimRight(path, "/"), "/session") {
			return // ending or creating sessions is not this target's business
		}
		u, err := url.Parse(path)
		if err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(u.Path, "/") {
			return
		}
		req := httptest.NewRequest(method, "/", strings.NewReader("{}"))
		req.URL = u
		rec := httptest.NewRecorder()
		fx.hub.ServeHTTP(rec, req)
		select {
		case p := <-forwarded:
			if dotSegment(p) {
				t.Fatalf("%s %q reached the driver as %q", method, path, p)
			}
		default:
		}
		if method != "HEAD" && rec.Code != 200 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: %d non-JSON %q", method, path, rec.Code, rec.Body)
		}
		if fx.sess.Len() != 1 {
			t.Fatalf("%s %q ended the session", method, path)
		}
	})
}
