package hub

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// A file a session wrote — a page its browser downloaded, a "video" or log
// its container made — is served so that nothing of it runs on the hub's
// origin: a video named report.html full of script, or a downloaded page,
// read /status as the hub (and, under -htpasswd, as the admin who opened it).
// Videos are video/mp4 and logs text whatever their names; the rest keep
// their type, sandboxed. So is what a session's own file server answers.
func TestSessionFilesRunNothingOnTheHubsOrigin(t *testing.T) {
	page := "<html><script>fetch('/status')</script></html>"
	dir := t.TempDir()
	for _, n := range []string{"report.html", "page.html"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fileServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, page)
	}))
	defer fileServer.Close()
	local := &url.URL{Scheme: "file", Path: dir}
	proxied, _ := url.Parse(fileServer.URL)
	var files atomic.Pointer[url.URL]
	f := newFixture(t, queue.Options{Limit: 2}, Options{LogDir: dir, VideoDir: dir},
		&stubLauncher{sides: func(e *launcher.Endpoints) { e.Files = files.Load(); e.Clipboard = proxied }})
	files.Store(local)
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	files.Store(proxied)
	_, body = f.do("POST", "/session", w3cChrome)
	id2 := body["value"].(map[string]any)["sessionId"].(string)
	if err := os.WriteFile(filepath.Join(dir, "run.webm"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, wantType := range map[string]string{
		"/session/" + id + "/url":         "",
		"/video/report.html":              "video/mp4",
		"/video/run.webm":                 "video/webm",
		"/logs/report.html":               "text/plain; charset=utf-8",
		"/download/" + id + "/page.html":  "",
		"/download/" + id2 + "/page.html": "",
		"/clipboard/" + id2:               "",
	} {
		resp, err := http.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "sandbox") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s is served without a sandbox and nosniff: %v", path, resp.Header)
		}
		if wantType != "" && resp.Header.Get("Content-Type") != wantType {
			t.Errorf("%s is %q, want %q", path, resp.Header.Get("Content-Type"), wantType)
		}
		// A video and a kept log are shown in the browser, as Selenoid shows them.
		if d := resp.Header.Get("Content-Disposition"); wantType != "" && !strings.HasPrefix(d, "inline") {
			t.Errorf("%s is served %q, want inline", path, d)
		}
	}
}

// A local browser's download directory is written by the browser, whose
// sandbox is the boundary: what it plants there (a link out of it, a FIFO)
// neither makes the hub read outside it, nor blocks a handler, nor leads an
// upload the hub stores for WebKit out of it.
func TestDownloadDirIsTheBoundary(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("fine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link": filepath.Join(outside, "secret"), ".uploads": outside} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := &url.URL{Scheme: "file", Path: dir}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{sides: func(e *launcher.Endpoints) { e.Files = files }})
	_, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","webkitgtk:browserOptions":{}}}}`)
	id := body["value"].(map[string]any)["sessionId"].(string)
	if caps, _ := body["value"].(map[string]any)["capabilities"].(map[string]any); caps["se:downloadsEnabled"] != true {
		t.Errorf("se:downloadsEnabled = %v for a session whose downloads se/files serves, want true", caps["se:downloadsEnabled"])
	}

	for _, name := range []string{"link", "fifo", "nope.txt", "../ok.txt", ".."} {
		resp, _ := f.do("GET", "/download/"+id+"/"+name, "")
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /download/%s/%s: %d, want 404", id, name, resp.StatusCode)
		}
		resp, body := f.do("POST", "/session/"+id+"/se/files", `{"name":"`+name+`"}`)
		if code, msg := errOf(body); resp.StatusCode != http.StatusBadRequest || code != "invalid argument" || !strings.Contains(msg, "se/files lists") {
			t.Errorf("se/files %s: %d %s %q, want 400 invalid argument pointing at the listing", name, resp.StatusCode, code, msg)
		}
	}
	resp, err := http.Get(f.srv.URL + "/download/" + id + "/ok.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != "fine" {
		t.Errorf("GET ok.txt: %d %q", resp.StatusCode, got)
	}
	// Grid's managed download, streamed: the file zipped and base64-encoded.
	_, body = f.do("POST", "/session/"+id+"/se/files", `{"name":"ok.txt"}`)
	v, _ := body["value"].(map[string]any)
	raw, err := base64.StdEncoding.DecodeString(fmt.Sprint(v["contents"]))
	if err != nil || v["filename"] != "ok.txt" {
		t.Fatalf("se/files ok.txt: %v (%v)", body, err)
	}
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil || len(zr.File) != 1 || zr.File[0].Name != "ok.txt" {
		t.Fatalf("se/files ok.txt: not a zip of the one file: %v", err)
	}
	rc, _ := zr.File[0].Open()
	got, _ = io.ReadAll(rc)
	if string(got) != "fine" {
		t.Errorf("se/files ok.txt holds %q", got)
	}

	resp, body = f.do("POST", "/session/"+id+"/se/file", uploadBody(zipOf(t, map[string][]byte{"up.txt": []byte("uploaded")})))
	if resp.StatusCode == http.StatusOK {
		t.Errorf("the upload was stored through a planted .uploads link: %v", body)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Errorf("the upload reached outside the download directory: %v", entries)
	}
}

// /logs and /video without their slash lead to the listings, as on Selenoid,
// the query kept.
func TestListingsWithoutSlash(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, queue.Options{Limit: 1}, Options{LogDir: dir, VideoDir: dir}, &stubLauncher{})
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]string{"/logs": "/logs/", "/video?json": "/video/?json"} {
		resp, err := noFollow.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
			t.Errorf("GET %s: %d to %q, want 307 to %q", path, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
	if resp, err := http.Get(f.srv.URL + "/video?json"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /video?json followed: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// Grid's managed downloads of a session whose image serves its downloads
// (a container's port 8080): the hub lists, fetches and removes them through
// the file server, and a file server that fails or answers no list is a W3C
// error, not an empty list.
func TestGridFilesFromAFileServer(t *testing.T) {
	var mu sync.Mutex
	stored := map[string]string{"a report.txt": "A"}
	broken := false
	fileServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		name := strings.TrimPrefix(r.URL.Path, "/")
		switch {
		case broken:
			io.WriteString(w, "<html>not a list</html>")
		case r.Method == http.MethodGet && name == "":
			names := []string{}
			for n := range stored {
				names = append(names, n)
			}
			json.NewEncoder(w).Encode(names)
		case stored[name] == "":
			http.NotFound(w, r)
		case r.Method == http.MethodDelete:
			delete(stored, name)
		default:
			io.WriteString(w, stored[name])
		}
	}))
	defer fileServer.Close()
	files, _ := url.Parse(fileServer.URL + "/")
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{sides: func(e *launcher.Endpoints) { e.Files = files }})
	_, body := f.do("POST", "/session", w3cChrome)
	v := body["value"].(map[string]any)
	id := v["sessionId"].(string)
	if caps, _ := v["capabilities"].(map[string]any); caps["se:downloadsEnabled"] != true {
		t.Errorf("se:downloadsEnabled = %v for a session whose image serves its downloads, want true", caps["se:downloadsEnabled"])
	}
	if _, body := f.do("GET", "/session/"+id+"/se/files", ""); fmt.Sprint(body["value"]) != "map[names:[a report.txt]]" {
		t.Errorf("se/files lists %v", body["value"])
	}
	_, body = f.do("POST", "/session/"+id+"/se/files", `{"name":"a report.txt"}`)
	file, _ := body["value"].(map[string]any)
	raw, _ := base64.StdEncoding.DecodeString(fmt.Sprint(file["contents"]))
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil || len(zr.File) != 1 || zr.File[0].Name != "a report.txt" {
		t.Fatalf("se/files a report.txt: %v, not a zip of the file (%v)", body, err)
	}
	if rc, _ := zr.File[0].Open(); rc != nil {
		if got, _ := io.ReadAll(rc); string(got) != "A" {
			t.Errorf("the zipped file holds %q", got)
		}
	}
	if resp, body := f.do("POST", "/session/"+id+"/se/files", `{"name":"b.txt"}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("se/files of a file the server does not have: %d %v, want 400", resp.StatusCode, body)
	}
	if resp, _ := f.do("DELETE", "/session/"+id+"/se/files", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("DELETE se/files: %d", resp.StatusCode)
	}
	mu.Lock()
	left := len(stored)
	broken = true
	mu.Unlock()
	if left != 0 {
		t.Errorf("%d files left on the file server after DELETE se/files", left)
	}
	if resp, body := f.do("GET", "/session/"+id+"/se/files", ""); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("se/files from a file server that answers no list: %d %v, want 500", resp.StatusCode, body)
	} else if code, msg := errOf(body); code != "unknown error" || !strings.Contains(msg, "file server") {
		t.Errorf("se/files from a broken file server: %s %q", code, msg)
	}
}

// A download from a local driver's directory, to a client that has stopped
// reading, is cut when its session ends: it held the file open (and its
// disk space, once the directory was removed) and, zipped for Grid's
// managed downloads, the hub's CPU, for as long as the client stayed.
func TestLocalDownloadEndsWithItsSession(t *testing.T) {
	const size = 256 << 20 // more than the sockets between client and hub buffer
	for _, c := range []struct{ name, method, path, body string }{
		{"download", "GET", "/download/%s/big.bin", ""},
		{"se/files", "POST", "/session/%s/se/files", `{"name":"big.bin"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "big.bin")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(file, size); err != nil {
				t.Fatal(err)
			}
			f := newFixture(t, queue.Options{Limit: 1}, Options{},
				&stubLauncher{sides: func(e *launcher.Endpoints) { e.Files = &url.URL{Scheme: "file", Path: dir} }})
			_, body := f.do("POST", "/session", w3cChrome)
			id := body["value"].(map[string]any)["sessionId"].(string)

			conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				c.method, fmt.Sprintf(c.path, id), len(c.body), c.body)
			head := make([]byte, 4096)
			if n, err := io.ReadAtLeast(conn, head, 12); err != nil || !strings.HasPrefix(string(head[:n]), "HTTP/1.1 200") {
				t.Fatalf("no answer: %q %v", head[:n], err)
			}
			if !openByUs(t, file) {
				t.Fatal("the file is not open while it is sent")
			}
			closed := closeOf(t, file)
			// The client reads nothing more; its session ends.
			if resp, _ := f.do("DELETE", "/session/"+id, ""); resp.StatusCode != 200 {
				t.Fatalf("DELETE: %d", resp.StatusCode)
			}
			// What the sockets hold comes, then the end. (The deadline only
			// keeps a broken hub from hanging the test.)
			conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
			n, err := io.Copy(io.Discard, conn)
			if err != nil {
				t.Fatalf("the answer did not end with the session: %v after %d bytes", err, n)
			}
			if n >= size {
				t.Fatalf("the whole file was sent (%d bytes) after its session ended", n)
			}
			select {
			case <-closed:
			case <-time.After(time.Minute): // a broken hub's bound, not a margin
			}
			if openByUs(t, file) {
				t.Error("the hub still holds the file open after its session ended")
			}
		})
	}
}

// closeOf returns a channel closed when a reader of path closes it (inotify).
func closeOf(t *testing.T, path string) <-chan struct{} {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.InotifyAddWatch(fd, path, syscall.IN_CLOSE_NOWRITE); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	t.Cleanup(func() { f.Close() })
	closed := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		if n, _ := f.Read(buf); n > 0 {
			close(closed)
		}
	}()
	return closed
}

// openByUs reports whether this process has path open.
func openByUs(t *testing.T, path string) bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); target == path || target == path+" (deleted)" {
			return true
		}
	}
	return false
}

// A managed download is deflated without compression: compressing, the hub
// worked through a whole file of zeros a browser downloaded while its client
// read a sliver of answer, so what a client made the hub do did not follow
// what it read. The entry is still Deflate, as Java's ZipInputStream needs of an
// entry whose sizes follow its data.
func TestManagedDownloadIsStoredDeflate(t *testing.T) {
	dir := t.TempDir()
	const size = 4 << 20
	if err := os.WriteFile(filepath.Join(dir, "zeros.bin"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, queue.Options{Limit: 1}, Options{},
		&stubLauncher{sides: func(e *launcher.Endpoints) { e.Files = &url.URL{Scheme: "file", Path: dir} }})
	_, body := f.do("POST", "/session", w3cChrome)
	id := body["value"].(map[string]any)["sessionId"].(string)
	_, body = f.do("POST", "/session/"+id+"/se/files", `{"name":"zeros.bin"}`)
	v, _ := body["value"].(map[string]any)
	raw, err := base64.StdEncoding.DecodeString(fmt.Sprint(v["contents"]))
	if err != nil {
		t.Fatalf("se/files: %v", err)
	}
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil || len(zr.File) != 1 {
		t.Fatalf("not a zip of one file: %v", err)
	}
	e := zr.File[0]
	if e.Method != zip.Deflate || e.CompressedSize64 < size || e.UncompressedSize64 != size {
		t.Errorf("entry: method %d, %d bytes for %d, want Deflate (8) storing at least the file's %d", e.Method, e.CompressedSize64, e.UncompressedSize64, size)
	}
}
