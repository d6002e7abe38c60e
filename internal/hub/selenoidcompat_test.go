package hub

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/websummoner/websummoner/internal/queue"
)

// A W3C request naming the browser only in desiredCapabilities, as older
// Selenium 3 clients send it, gets that browser and version, as Selenoid
// gives them; the answer is W3C's.
func TestBrowserFromDesiredCapabilities(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 2}, Options{}, &stubLauncher{})
	for _, body := range []string{
		`{"capabilities":{"alwaysMatch":{}},"desiredCapabilities":{"browserName":"chrome","version":"127"}}`,
		`{"capabilities":{},"desiredCapabilities":{"browserName":"chrome","version":"127"}}`,
	} {
		resp, answer := f.do("POST", "/wd/hub/session", body)
		v, _ := answer["value"].(map[string]any)
		if resp.StatusCode != 200 || v["sessionId"] == nil || answer["sessionId"] != nil {
			t.Fatalf("%s: %d %v; want a W3C session", body, resp.StatusCode, answer)
		}
	}
	_, st := f.do("GET", "/status", "")
	q, _ := st["browsers"].(map[string]any)["chrome"].(map[string]any)["127"].(map[string]any)["unknown"].(map[string]any)
	if q["count"] != 2.0 {
		t.Fatalf("/status files %v under chrome 127; want both sessions", q)
	}
}

// Test names are video and log names, as Selenoid takes them: spaces,
// brackets, '#', '%', ':' and accents. A session asking for one starts, and
// kept files of such names are listed and served to a client that escapes
// them in the URL, as HTTP clients do.
func TestKeptFileNamesAsTestNames(t *testing.T) {
	logs, videos := t.TempDir(), t.TempDir()
	names := []string{"Checkout #1 (chrome) [a+b] @home, é: 50%.log", "why? 100%", "テスト ログイン.mp4"}
	f := newFixture(t, queue.Options{Limit: 2}, Options{LogDir: logs, VideoDir: videos}, &stubLauncher{})
	body := `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"enableLog":true,"logName":` + quote(t, names[0]) + `}}}}`
	if resp, answer := f.do("POST", "/session", body); resp.StatusCode != 200 {
		t.Fatalf("a session with logName %q: %d %v", names[0], resp.StatusCode, answer)
	}
	for _, dir := range []string{logs, videos} {
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("content of "+n), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, kind := range []string{"/logs/", "/video/"} {
		var listed []string
		if _, list := get(f.srv.URL + kind + "?json"); json.Unmarshal([]byte(list), &listed) != nil || !slices.Equal(listed, slices.Sorted(slices.Values(names))) {
			t.Errorf("%s?json lists %q; want %q", kind, listed, names)
		}
		_, page := get(f.srv.URL + kind)
		for _, n := range names {
			if code, got := get(f.srv.URL + kind + url.PathEscape(n)); code != 200 || got != "content of "+n {
				t.Errorf("GET %s%s: %d %q", kind, url.PathEscape(n), code, got)
			}
			// The listing's link, as a browser follows it.
			href := strings.ReplaceAll(url.PathEscape(n), ":", "%3A")
			if !strings.Contains(page, `href="`+href+`"`) {
				t.Errorf("%s listing has no link %q: %s", kind, href, page)
			} else if code, got := get(f.srv.URL + kind + href); code != 200 || got != "content of "+n {
				t.Errorf("the listing's link %s%s: %d %q", kind, href, code, got)
			}
		}
	}
	if resp, answer := f.do("DELETE", "/video/"+url.PathEscape(names[1]), ""); resp.StatusCode != 200 {
		t.Fatalf("DELETE %q: %d %v", names[1], resp.StatusCode, answer)
	}
	if _, err := os.Stat(filepath.Join(videos, names[1])); !os.IsNotExist(err) {
		t.Errorf("%q is still there after DELETE: %v", names[1], err)
	}
}

// quote is s as a JSON string.
func quote(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
