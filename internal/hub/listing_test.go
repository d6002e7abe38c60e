package hub

import (
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
)

// Every HTML listing (/logs/, /video/, /download/{id}/) links each file by a
// path relative to the listing, whatever its name: a file named
// "javascript:alert(1)" was a script link (url.PathEscape keeps ':'). Names are
// escaped, and the page is served nosniff with a policy that runs no script.
func TestListingsAreNotScript(t *testing.T) {
	names := []string{"javascript:alert(1)", "JavaScript:alert(2)", "data:text,x", `"><img src=x onerror=alert(3)>`, "a&b c.log", "plain.log"}
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files := &url.URL{Scheme: "file", Path: dir}
	f := newFixture(t, queue.Options{Limit: 1}, Options{LogDir: dir, VideoDir: dir},
		&stubLauncher{sides: func(e *launcher.Endpoints) { e.Files = files }})
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)

	href := regexp.MustCompile(`<a href="([^"]*)">`)
	for _, listing := range []string{"/logs/", "/video/", "/download/" + id + "/"} {
		resp, err := http.Get(f.srv.URL + listing)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s is served without nosniff and a script-free policy: %v", listing, resp.Header)
		}
		if strings.Contains(string(page), "<img") {
			t.Errorf("%s shows a name unescaped: %s", listing, page)
		}
		base, _ := url.Parse(f.srv.URL + listing)
		links := href.FindAllStringSubmatch(string(page), -1)
		if len(links) != len(names) {
			t.Fatalf("%s has %d links, want %d: %s", listing, len(links), len(names), page)
		}
		got := map[string]bool{}
		for _, l := range links {
			ref, err := url.Parse(html.UnescapeString(l[1]))
			if err != nil || ref.Scheme != "" || ref.Host != "" || ref.Opaque != "" {
				t.Errorf("%s links %q: not a path relative to the listing (scheme %q)", listing, l[1], ref.Scheme)
				continue
			}
			to := base.ResolveReference(ref)
			name, ok := strings.CutPrefix(to.Path, base.Path)
			if !ok || strings.Contains(name, "/") {
				t.Errorf("%s links %q to %s, outside the listing", listing, l[1], to.Path)
			}
			got[name] = true
		}
		for _, n := range names {
			if !got[n] {
				t.Errorf("%s has no link to %q: %s", listing, n, page)
			}
		}
	}
}
