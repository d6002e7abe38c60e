package hub

import (
	"archive/zip"
	"compress/flate"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/mux"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// A session's downloads, wherever its launcher keeps them (launcher.Endpoints
// Files): a directory of the hub's host (file://, local drivers) served here, or
// the image's file server on port 8080 (Selenoid's contract), proxied.
//
//	GET    /download/{id}/           list (?json: a JSON array of names; else HTML)
//	GET    /download/{id}/{file}     the file
//	DELETE /download/{id}/{file}     remove it
//	… and Selenoid's alias /session/{id}/aerokube/download/…, and Grid 4's
//	GET/POST/DELETE /session/{id}/se/files.

// downloads serves /download/{id}/… and its aliases.
func (h *Hub) downloads(w http.ResponseWriter, r *http.Request) {
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	defer h.sessions.Done(s)
	files := s.Endpoints().Files
	name, err := url.PathUnescape(mux.Vars(r)["file"])
	if err != nil || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument,
			fmt.Sprintf("%q is not a file name: names have no path, no \"..\"", mux.Vars(r)["file"]))
		return
	}
	switch {
	case files == nil:
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation,
			fmt.Sprintf("session %s has no downloads: its image does not serve files on port 8080", s.ID))
	case files.Scheme == "file":
		defer cutAtEnd(w, s)()
		serveDir(w, r, files.Path, name, downloadFiles)
	default:
		target := files.JoinPath(url.PathEscape(name))
		if name == "" {
			target = files.JoinPath("/")
		}
		h.proxySocket(w, r, s, target)
	}
}

// sandboxed marks an answer a session's container, browser or driver made
// (the container is the client's): whatever it says it is, a browser that
// opens it on the hub's origin runs nothing of it and guesses no other
// type. A page a client's browser downloaded, or a "video" its container
// made, ran script as the hub (/status, another user's files, an admin's
// session). Files the hub serves itself (serveDir) get the same.
func sandboxed(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	// Downloads allowed: a file server's listing is such a page, and its
	// links are downloads.
	h.Set("Content-Security-Policy", "sandbox allow-downloads; default-src 'none'")
}

// fileKind says what a served directory holds: its files' noun in errors,
// whether a browser shows one (a video plays in the page) or saves it, and
// what to tell an admin-only refusal and a hub that keeps none.
type fileKind struct {
	noun   string
	inline bool
	// ownSuffix ends the name a session's file is kept under by default,
	// after its id: its owner's to fetch and remove.
	ownSuffix     string
	forAdmins     string
	noneKept      string
	nameExplained string
}

var (
	downloadFiles = fileKind{noun: "downloaded file"}
	logFiles      = fileKind{noun: "log file", inline: true, nameExplained: `names have no path, no ".."`, ownSuffix: ".log",
		forAdmins: "session log files are served to -admin-users only, and each to its session's owner as {session-id}.log (not under a logName); follow your live session at /logs/{session-id}",
		noneKept:  "no session logs are kept: start the hub with -log-output-dir (and enableLog, or -save-all-logs)"}
	videoFiles = fileKind{noun: "video", inline: true, nameExplained: `names have no path and do not start with "."`, ownSuffix: ".mp4",
		forAdmins: "videos are served to -admin-users only, and each to its session's owner as {session-id}.mp4 (not under a videoName)",
		noneKept:  "no videos are kept: this hub records none (-video-output-dir is unset or not writable, or it runs with -disable-docker)"}
)

// fileName is the {name} of a kept-files route, unescaped; ok is false (and
// the client told why) for a name with a path, "..", or a leading dot.
func fileName(w http.ResponseWriter, r *http.Request, kind fileKind) (string, bool) {
	raw := mux.Vars(r)["name"]
	name, err := url.PathUnescape(raw)
	if err != nil || strings.ContainsAny(name, `/\`) || name == "." || name == ".." || strings.HasPrefix(name, ".") {
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument,
			fmt.Sprintf("%q is not a %s name: %s", raw, kind.noun, kind.nameExplained))
		return "", false
	}
	return name, true
}

// serveKept serves a directory of every user's kept files (logs, videos): the
// operator's, so admins only under -htpasswd, but for the file a user's own
// session is kept under by default (ggr's clients fetch their videos so).
func (h *Hub) serveKept(w http.ResponseWriter, r *http.Request, dir, name string, kind fileKind) {
	if h.opts.Auth != nil && h.opts.Auth.Enabled() && !h.opts.Auth.Admin(userOf(r)) && !h.ownSessionFile(userOf(r), name, kind) {
		webdriver.WriteError(w, http.StatusForbidden, webdriver.ErrUnknownError, kind.forAdmins)
		return
	}
	if dir == "" {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation, kind.noneKept)
		return
	}
	serveDir(w, r, dir, name, kind)
}

// ownSessionFile reports whether name is the file a session of user's, live
// or recently ended (session.Options.Remember), is kept under by default:
// its id and the kind's suffix. A name a client chose (videoName, logName)
// is not: another user's session may have chosen the same.
func (h *Hub) ownSessionFile(user, name string, kind fileKind) bool {
	id, ok := strings.CutSuffix(name, kind.ownSuffix)
	if !ok || kind.ownSuffix == "" || id == "" || launcher.SafeName(id) != id {
		return false
	}
	if s, ok := h.sessions.Get(id); ok {
		return s.Owner == user
	}
	_, owner, ok := h.sessions.EndedReason(id)
	return ok && owner == user
}

// keptUnder refuses a session id that a kept file is named after by default
// ({id}.mp4, {id}.log): the driver chose the id, and a user's session of
// that id would be taken for the owner of another's file (ownSessionFile),
// one whose session the registry has forgotten or that chose that name.
func (h *Hub) keptUnder(id string) error {
	for _, k := range []struct {
		dir  string
		kind fileKind
	}{{h.opts.VideoDir, videoFiles}, {h.opts.LogDir, logFiles}} {
		if k.dir == "" || launcher.SafeName(id) != id {
			continue
		}
		if _, err := os.Lstat(filepath.Join(k.dir, id+k.kind.ownSuffix)); err == nil {
			return fmt.Errorf("%w: %s", session.ErrDuplicate, id)
		}
	}
	return nil
}

// checkKeptNames refuses a videoName or logName that is the name a session
// the hub knows, live or recently ended, keeps its own video or log under by
// default ({id}.mp4, {id}.log). Every user reads the ids in /status: a
// session that saved first under another's name would have its file served
// to that session's owner as theirs (ownSessionFile), and push the owner's
// own file to a name only admins may read.
func (h *Hub) checkKeptNames(o webdriver.Options) error {
	for _, n := range []struct {
		name, cap string
		kind      fileKind
	}{{o.VideoName, "videoName", videoFiles}, {o.LogName, "logName", logFiles}} {
		id, ok := strings.CutSuffix(n.name, n.kind.ownSuffix)
		if !ok || id == "" {
			continue
		}
		_, live := h.sessions.Get(id)
		_, _, ended := h.sessions.EndedReason(id)
		if live || ended {
			return &webdriver.ArgumentError{Msg: fmt.Sprintf("%s %q is the name session %s's own %s is kept under: choose a name that is not another session's id", n.cap, n.name, id, n.kind.noun)}
		}
	}
	return nil
}

// serveDir serves a directory of finished files: GET lists (?json: a JSON
// array), GET or HEAD of a name serves it (with Range), DELETE removes it.
func serveDir(w http.ResponseWriter, r *http.Request, dir, name string, kind fileKind) {
	if name == "" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead { // HEAD: uptime checks, as on Selenoid's file server
			methodNotAllowed(w, r)
			return
		}
		names := listFiles(dir, kind == downloadFiles)
		if _, asJSON := r.URL.Query()["json"]; asJSON {
			writeJSON(w, http.StatusOK, names)
			return
		}
		// The names are anyone's (a download, a client's video name): the page
		// shows links and nothing else (no script, injected or a javascript:
		// link; no style, frame or form) and is never read as anything but HTML.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		fmt.Fprint(w, "<!doctype html><pre>\n")
		for _, n := range names {
			// Each link is a path segment relative to the listing, never a
			// scheme or a host: url.PathEscape keeps ':', so a file named
			// "javascript:alert(1)" was a script link; without ':' and '/' a
			// name cannot begin a scheme or an authority.
			href := strings.ReplaceAll(url.PathEscape(n), ":", "%3A")
			fmt.Fprintf(w, "<a href=\"%s\">%s</a>\n", html.EscapeString(href), html.EscapeString(n))
		}
		fmt.Fprint(w, "</pre>\n")
		return
	}
	path := filepath.Join(dir, name)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		f, st, err := openRegular(dir, name)
		if err != nil {
			webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidArgument, fmt.Sprintf("no %s %q", kind.noun, name))
			return
		}
		defer f.Close()
		disposition := "attachment"
		if kind.inline {
			disposition = "inline"
		}
		w.Header().Set("Content-Disposition", disposition+"; filename*=UTF-8''"+url.PathEscape(name))
		csp := "sandbox; default-src 'none'"
		switch kind.noun {
		case videoFiles.noun:
			// The format the recorder wrote for this name; and a video
			// opened on its own plays (its page loads its media from itself).
			w.Header().Set("Content-Type", launcher.RecordingType(name))
			csp += "; media-src 'self'"
		case logFiles.noun:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", csp)
		http.ServeContent(w, r, name, st.ModTime(), f)
	case http.MethodDelete:
		if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() || os.Remove(path) != nil {
			webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidArgument, fmt.Sprintf("no %s %q", kind.noun, name))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"value": nil})
	default:
		methodNotAllowed(w, r)
	}
}

// openRegular opens dir's regular file name for reading. A download
// directory is written by the session's browser, whose sandbox is the
// boundary: a link it planted must not make the hub read a file outside the
// directory (os.Root resolves links within it only), and a FIFO must not
// block the open (O_NONBLOCK; anything not a regular file is refused).
func openRegular(dir, name string) (*os.File, os.FileInfo, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", name)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// listFiles names the finished files in dir, sorted, but hidden ones (a
// video being copied in); of downloads, Chromium's partial ones
// (.crdownload) are not downloads yet. A kept log or video may have any
// name a client chose, that one too.
func listFiles(dir string, downloads bool) []string {
	entries, _ := os.ReadDir(dir)
	names := []string{}
	for _, e := range entries {
		if e.Type().IsRegular() && !(downloads && strings.HasSuffix(e.Name(), ".crdownload")) && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// gridFiles serves Grid 4's managed downloads: GET lists, POST {"name"} returns
// the file zipped and base64-encoded, DELETE removes them all. A local
// driver's downloads are a directory of the hub's; a container's are its
// image's file server (gridFilesServed).
func (h *Hub) gridFiles(w http.ResponseWriter, r *http.Request) {
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	defer h.sessions.Done(s)
	files := s.Endpoints().Files
	if files == nil {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation,
			fmt.Sprintf("session %s has no downloads: its image does not serve files on port 8080", s.ID))
		return
	}
	if files.Scheme != "file" {
		h.gridFilesServed(w, r, s, files)
		return
	}
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"value": map[string]any{"names": listFiles(files.Path, true)}})
	case http.MethodPost:
		name, ok := gridFileName(w, r, s)
		if !ok {
			return
		}
		f, _, err := openRegular(files.Path, name)
		if err != nil {
			noGridFile(w, s, name)
			return
		}
		defer f.Close()
		defer cutAtEnd(w, s)()
		writeZippedFile(w, name, f)
	case http.MethodDelete:
		for _, n := range listFiles(files.Path, true) {
			_ = os.Remove(filepath.Join(files.Path, n))
		}
		writeJSON(w, http.StatusOK, map[string]any{"value": nil})
	default:
		methodNotAllowed(w, r)
	}
}

// gridFilesServed serves Grid's managed downloads of a session whose image
// serves them (Selenoid's contract, port 8080: GET /?json lists, GET /{name}
// and DELETE /{name}), through the Transport its commands take. The
// calls end with the client's request or the session.
func (h *Hub) gridFilesServed(w http.ResponseWriter, r *http.Request, s *session.Session, files *url.URL) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	cancelAtEnd(ctx, cancel, s)
	call := func(method string, u *url.URL) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
		if err != nil {
			return nil, err
		}
		return h.opts.Transport.RoundTrip(req)
	}
	list := func() ([]string, error) {
		u := files.JoinPath("/")
		u.RawQuery = "json"
		resp, err := call(http.MethodGet, u)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var names []string
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("its listing answered %s", resp.Status)
		}
		// A listing is a name per file: a few MiB is more than a browser's
		// downloads of a session can name.
		if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&names); err != nil {
			return nil, fmt.Errorf("its listing is not a JSON list of names: %v", err)
		}
		if len(names) > maxServedFiles {
			return nil, fmt.Errorf("its listing names %d files, more than the %d a session's downloads may hold here", len(names), maxServedFiles)
		}
		sort.Strings(names)
		return names, nil
	}
	down := func(err error) { h.sideChannelDown(w, s, "the file server", files, err) }
	switch r.Method {
	case http.MethodGet:
		names, err := list()
		if err != nil {
			down(err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"value": map[string]any{"names": names}})
	case http.MethodPost:
		name, ok := gridFileName(w, r, s)
		if !ok {
			return
		}
		resp, err := call(http.MethodGet, files.JoinPath(url.PathEscape(name)))
		if err != nil {
			down(err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			noGridFile(w, s, name)
			return
		}
		writeZippedFile(w, name, resp.Body)
	case http.MethodDelete:
		names, err := list()
		if err == nil {
			for _, n := range names {
				var resp *http.Response
				if resp, err = call(http.MethodDelete, files.JoinPath(url.PathEscape(n))); err != nil {
					break
				}
				resp.Body.Close()
			}
		}
		if err != nil {
			down(err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"value": nil})
	default:
		methodNotAllowed(w, r)
	}
}

// maxServedFiles bounds the files of a file server's listing the hub takes,
// and so the removals one DELETE of managed downloads makes: the listing is
// the client's container's.
const maxServedFiles = 10000

// cancelAtEnd calls cancel when the session ends, unless ctx is done first:
// what a side channel does for a session ends with it.
func cancelAtEnd(ctx context.Context, cancel context.CancelFunc, s *session.Session) {
	go func() {
		select {
		case <-s.Ended():
			cancel()
		case <-ctx.Done():
		}
	}()
}

// cutAtEnd cuts the answer w is writing when session s ends: a download
// from a directory of the hub's, to a client that reads slowly or not at
// all, would otherwise hold the file open (its disk space too, once the
// session's directory is removed) for as long as the client's connection
// lasts. The handler defers the returned stop, which waits for a cut under
// way, so no deadline is set on w after the handler returned, and lifts
// the deadline of a cut that came after the last write, so the connection
// serves its next request.
func cutAtEnd(w http.ResponseWriter, s *session.Session) (stop func()) {
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(context.Background())
	cancelAtEnd(ctx, cancel, s)
	var cut atomic.Bool
	stopCut := whileServing(ctx, func() {
		cut.Store(true)
		_ = rc.SetWriteDeadline(time.Now())
	})
	return func() {
		stopCut()
		cancel()
		if cut.Load() {
			_ = rc.SetWriteDeadline(time.Time{})
		}
	}
}

// gridFileName reads the {"name"} of a managed download's POST: one of the
// names the listing gives, without a path. ok is false, and the client told
// why, for any other body.
func gridFileName(w http.ResponseWriter, r *http.Request, s *session.Session) (string, bool) {
	var in struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&in); err != nil || in.Name == "" {
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument, `the body must be {"name": "<file name>"}`)
		return "", false
	}
	if strings.ContainsAny(in.Name, `/\`) || in.Name == ".." || in.Name == "." {
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument,
			fmt.Sprintf("%.200q is not a file name: give one of the names GET /session/%s/se/files lists, without a path", in.Name, s.ID))
		return "", false
	}
	return in.Name, true
}

// noGridFile answers a managed download of a name the session has no file by.
func noGridFile(w http.ResponseWriter, s *session.Session, name string) {
	webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument,
		fmt.Sprintf("session %s has no downloaded file %.200q: GET /session/%s/se/files lists its files", s.ID, name, s.ID))
}

// writeZippedFile answers {"value": {"filename", "contents"}}, contents being
// the file zipped and base64-encoded, streamed: a browser can download
// gigabytes, and holding the file, its zip and their base64 at once would
// cost the hub several times that in memory. A read error after the status
// is written can only cut the answer short, which the client sees as broken
// JSON rather than a wrong file.
//
// The entry is deflated at level 0 (stored blocks): a compressing deflate
// spends the hub's CPU on every byte of the file however little of it the
// client reads, and a file of zeros shrinks a thousandfold, so a client
// could keep a core busy for a trickle of answer; stored, the hub's work
// follows the bytes the client reads. It is still Deflate, which every client's unzip reads, Java's
// ZipInputStream among them: that one refuses a Stored entry whose sizes
// follow its data, as a stream's must.
func writeZippedFile(w http.ResponseWriter, name string, f io.Reader) {
	quoted, _ := json.Marshal(name)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, `{"value":{"filename":%s,"contents":"`, quoted)
	b64 := base64.NewEncoder(base64.StdEncoding, w)
	zw := zip.NewWriter(b64)
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.NoCompression)
	})
	fw, err := zw.Create(name)
	if err == nil {
		_, err = io.Copy(fw, f)
	}
	if err != nil {
		panic(http.ErrAbortHandler) // no closing quote: the client cannot take a cut zip for a whole one
	}
	_ = zw.Close()
	_ = b64.Close()
	_, _ = io.WriteString(w, `"}}`)
}

// clipboard serves /clipboard/{id}: the image's clipboard service on port 9090
// (Selenoid's contract), proxied; a clear refusal without one.
func (h *Hub) clipboard(w http.ResponseWriter, r *http.Request) {
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	defer h.sessions.Done(s)
	if cb := s.Endpoints().Clipboard; cb != nil {
		h.proxySocket(w, r, s, cb.JoinPath("/"))
		return
	}
	webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation,
		fmt.Sprintf("session %s has no clipboard: it needs a browser with an X display whose image serves the clipboard on port 9090 (aerokube's images do; the project's Chromium image does not)", s.ID))
}

// withDownloadDir points the browser's downloads at dir, over whatever the
// client asked: a session's downloads go to its own directory only
// (launcher.DownloadPrefs).
func withDownloadDir(body []byte, dir string) []byte {
	for key, prefs := range launcher.DownloadPrefs(dir) {
		body = withBrowser(body, key, browserNames[key], func(opts map[string]any) {
			opts["prefs"] = webdriver.Merge(asMap(opts["prefs"]), prefs)
		})
	}
	return body
}

// withProxyFlag tells WebKitGTK's MiniBrowser its way out, the sandbox's
// proxy, by its --proxy flag, last, so it is the one MiniBrowser takes: the
// sandbox keeps GLib's programs, MiniBrowser among them, off the proxy
// variables of the environment (egress.Env). A client's own --proxy or W3C
// proxy cannot lead out of the sandbox, whose only other address is its
// loopback.
func withProxyFlag(body []byte, proxy *url.URL) []byte {
	return withBrowser(body, webkitOptions, []string{"MiniBrowser"}, func(opts map[string]any) {
		list, _ := opts["args"].([]any)
		opts["args"] = append(list, "--proxy="+proxy.String())
	})
}

// browserNames are, by options block, the browserNames whose driver reads
// it; a body that names none of them gets the block only if it has one.
var browserNames = map[string][]string{
	"goog:chromeOptions": {"chrome", "chromium", ""},
	"ms:edgeOptions":     {"MicrosoftEdge", "msedge"},
	"moz:firefoxOptions": {"firefox"},
}

// withScreen sizes a Chromium-based browser's window and screen as the session's
// screenResolution says: --window-size for a browser on a display, and
// --screen-info for a headless one, whose screen is otherwise 800x600.
func withScreen(body []byte, screen string) []byte {
	w, h, _, ok := webdriver.ParseScreen(screen)
	if !ok {
		return body
	}
	args := []any{fmt.Sprintf("--window-size=%d,%d", w, h), fmt.Sprintf("--screen-info={%dx%d}", w, h)}
	return withChromium(body, func(opts map[string]any) {
		list, _ := opts["args"].([]any)
		for _, a := range list {
			if s, _ := a.(string); strings.HasPrefix(s, "--window-size") || strings.HasPrefix(s, "--screen-info") {
				return // the client sized it itself
			}
		}
		opts["args"] = append(list, args...)
	})
}

// webkit reports a session of WebKit (WebKitGTK's MiniBrowser): an entry that
// runs on a display of its own, or whose driver gets webkitgtk:browserOptions.
// Its driver has no flag for the window's size and no /file.
func webkit(c *creation) bool {
	if c.browser.Browser != nil && c.browser.Display {
		return true
	}
	_, entry := c.browser.Caps[webkitOptions]
	_, client := c.caps[webkitOptions]
	return entry || client
}

// webkitOptions are WebKitGTK's capabilities.
const webkitOptions = "webkitgtk:browserOptions"

// sizeWindow makes a WebKit browser window (MiniBrowser)
// as large as the session's screenResolution, through WebDriver's own Set
// Window Rect: such a browser has no flag for it, and its default window is
// smaller than the screen. A failure costs the client only the size, and is
// logged.
func (h *Hub) sizeWindow(c *creation, inst launcher.Instance, ds webdriver.DriverSession) {
	w, ht, _, ok := webdriver.ParseScreen(c.opts.ScreenResolution)
	if !webkit(c) || !ok {
		return
	}
	body, _ := json.Marshal(map[string]int{"x": 0, "y": 0, "width": w, "height": ht})
	ctx, cancel := context.WithTimeout(c.ctx, h.opts.SessionAttemptTimeout)
	defer cancel()
	status, data, err := h.driverCall(ctx, http.MethodPost, driverURL(inst, ds, "session", ds.ID, "window", "rect"), body, 1<<20)
	if err != nil || status != http.StatusOK {
		logtag.Event(h.log, slog.LevelWarn, c.id, "WINDOW_NOT_SIZED", c.browser.String(), fmt.Sprintf("status %d", status), err, webdriver.Truncate(data, 200))
	}
}

// withChromium edits the options of a Chromium-based browser (Chrome, Chromium,
// Edge) in a new-session body; another browser's body is returned as it is.
func withChromium(body []byte, edit func(opts map[string]any)) []byte {
	body = withBrowser(body, "goog:chromeOptions", browserNames["goog:chromeOptions"], edit)
	return withBrowser(body, "ms:edgeOptions", browserNames["ms:edgeOptions"], edit)
}

// withBrowser edits a new-session body's options block key, when the body
// has one or its browserName is one of names; another body is returned as it
// is.
func withBrowser(body []byte, key string, names []string, edit func(opts map[string]any)) []byte {
	var req map[string]any
	if json.Unmarshal(body, &req) != nil {
		return body
	}
	caps, _ := req["capabilities"].(map[string]any)
	always, _ := caps["alwaysMatch"].(map[string]any)
	if always == nil {
		// A JSONWire client's body (webdriver.DriverBody): its chromeOptions
		// are already named goog:chromeOptions.
		always, _ = req["desiredCapabilities"].(map[string]any)
	}
	if always == nil {
		return body
	}
	name, _ := always["browserName"].(string)
	if _, asked := always[key]; !asked && !slices.Contains(names, name) {
		return body // another browser: its driver takes no such options
	}
	opts, _ := always[key].(map[string]any)
	if opts == nil {
		opts = map[string]any{}
	}
	edit(opts)
	always[key] = opts
	out, err := json.Marshal(req)
	if err != nil {
		return body
	}
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
