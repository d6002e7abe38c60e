package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"golang.org/x/net/http/httpguts"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// The side channels of a session, each a WebSocket (or HTTP) proxy to the
// address its launcher reported in launcher.Endpoints:
//
//	/devtools/{id}/ and /devtools/{id}/browser  the browser's DevTools socket (se:cdp)
//	/devtools/{id}/page                         the session's first page target
//	/devtools/{id}/page/{target}                that page target
//	/devtools/{id}/json/version, /json/list     DevTools' HTTP, socket URLs pointing at the hub
//	/devtools/{id}/json/protocol                the protocol's description, as the browser serves it
//	/session/{id}/se/bidi                       the driver's WebDriver BiDi socket (webSocketUrl)

// maxDevToolsJSON bounds what is read of DevTools' /json answers.
const maxDevToolsJSON = 1 << 20

// maxDevToolsProtocol bounds DevTools' /json/protocol, which is relayed, not
// read: it is megabytes, past maxDevToolsJSON.
const maxDevToolsProtocol = 32 << 20

// devtools serves /devtools/{id}/… .
func (h *Hub) devtools(w http.ResponseWriter, r *http.Request) {
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	// Opening counts as a command; after it, traffic through the socket
	// (proxySocket) keeps the session alive, not the socket being open.
	h.sessions.Done(s)
	dt := s.Endpoints().DevTools
	if s.WebKit {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation,
			fmt.Sprintf("session %s is WebKit (%s), which has no DevTools endpoint: CDP is Chromium's; drive it through WebDriver", s.ID, s.Browser))
		return
	}
	if dt == nil {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation,
			fmt.Sprintf("session %s has no DevTools: its browser does not report a debugger address, or its image does not serve DevTools on port 7070", s.ID))
		return
	}
	// Playwright's connectOverCDP asks for json/version/, with the slash.
	rest := strings.TrimSuffix(strings.TrimPrefix(mux.Vars(r)["rest"], "/"), "/")
	target, targetOK := devtoolsTarget(rest)
	switch {
	case rest == "json/version" || rest == "json/list" || rest == "json":
		h.devtoolsJSON(w, r, s, dt, rest)
		return
	case rest == "json/protocol":
		h.devtoolsProtocol(w, r, s, dt)
		return
	case rest == "" || rest == "browser":
		h.devtoolsSocket(w, r, s, dt, rest, "json/version", func(v json.RawMessage) string {
			var info struct {
				WS string `json:"webSocketDebuggerUrl"`
			}
			_ = json.Unmarshal(v, &info)
			return info.WS
		})
	case rest == "page":
		h.devtoolsSocket(w, r, s, dt, rest, "json/list", func(v json.RawMessage) string {
			var targets []struct{ Type, WebSocketDebuggerURL string }
			_ = json.Unmarshal(v, &targets)
			for _, t := range targets {
				if t.Type == "page" {
					return t.WebSocketDebuggerURL
				}
			}
			return ""
		})
	case targetOK:
		if _, err := h.fetchDevTools(r.Context(), dt, "json/version"); errors.Is(err, errAerokubeDevTools) {
			h.proxySocket(w, r, s, dt.JoinPath("page", target))
			return
		}
		h.proxySocket(w, r, s, dt.JoinPath("devtools", "page", target))
	default:
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrUnknownCommand,
			fmt.Sprintf("/devtools/%s/%s is not a DevTools endpoint: use /, /browser, /page, /page/{targetId}, /json/version, /json/list or /json/protocol", s.ID, rest))
	}
}

// devtoolsTarget reads page/{targetId}: the id unescaped, one path segment
// that is not a dot segment (JoinPath would clean "..", and the request
// would reach another DevTools path than the page's), and holds no '%'
// (it is sent unescaped: "%252F" would become a '/' there).
func devtoolsTarget(rest string) (string, bool) {
	esc, ok := strings.CutPrefix(rest, "page/")
	if !ok {
		return "", false
	}
	id, err := url.PathUnescape(esc)
	if err != nil || id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\\?#%") {
		return "", false
	}
	return id, true
}

// errAerokubeDevTools is port 7070's 200 without JSON to a /json/… request:
// aerokube's devtools program (their selenoid/chrome images) serves no /json/version or
// /json/list, but /, /browser, /page and /page/{targetId} as sockets itself,
// which Selenoid proxies path for path.
var errAerokubeDevTools = errors.New("aerokube's devtools: no /json answers")

// fetchDevTools reads one of DevTools' /json answers.
func (h *Hub) fetchDevTools(ctx context.Context, dt *url.URL, path string) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, dt.JoinPath(path).String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDevToolsJSON))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK && !json.Valid(data) {
		return nil, errAerokubeDevTools
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("DevTools answered %d: %s", resp.StatusCode, webdriver.Truncate(data, 200))
	}
	return data, nil
}

// devtoolsSocket finds a socket URL in one of DevTools' /json answers and
// proxies the client's WebSocket to it; to aerokube's devtools, it proxies
// the client's path (rest) as it is.
func (h *Hub) devtoolsSocket(w http.ResponseWriter, r *http.Request, s *session.Session, dt *url.URL, rest, path string, pick func(json.RawMessage) string) {
	data, err := h.fetchDevTools(r.Context(), dt, path)
	if errors.Is(err, errAerokubeDevTools) {
		h.proxySocket(w, r, s, dt.JoinPath(rest))
		return
	}
	if err != nil {
		h.sideChannelDown(w, s, "DevTools", dt, err)
		return
	}
	ws, err := url.Parse(pick(data))
	if err != nil || ws.Path == "" {
		h.sideChannelDown(w, s, "DevTools", dt, fmt.Errorf("no socket in its /%s answer", path))
		return
	}
	h.proxySocket(w, r, s, dt.JoinPath(ws.Path))
}

// devtoolsJSON passes DevTools' /json answers on with every socket URL
// pointing at the hub, so a client that follows them stays behind it.
func (h *Hub) devtoolsJSON(w http.ResponseWriter, r *http.Request, s *session.Session, dt *url.URL, path string) {
	data, err := h.fetchDevTools(r.Context(), dt, path)
	if errors.Is(err, errAerokubeDevTools) {
		// It answered, with no JSON: there is nothing to pass on (Selenoid
		// passes its empty 200), and the browser is not down.
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation,
			fmt.Sprintf("session %s's image runs aerokube's devtools, which has no /%s: open a WebSocket to /devtools/%s/browser or /devtools/%s/page instead", s.ID, path, s.ID, s.ID))
		return
	}
	if err != nil {
		h.sideChannelDown(w, s, "DevTools", dt, err)
		return
	}
	base := h.wsBase(r) + "/devtools/" + url.PathEscape(s.ID)
	text := string(data)
	for _, from := range []string{"ws://" + dt.Host + "/devtools/browser/", "ws://localhost:" + dt.Port() + "/devtools/browser/", "ws://127.0.0.1:" + dt.Port() + "/devtools/browser/"} {
		text = replaceSocket(text, from, base+"/browser", true)
	}
	// The frontend's link names the page's socket as a parameter, ws=HOST/…
	// (wss= behind TLS), without the scheme.
	param := strings.Replace(base, "://", "=", 1)
	for _, host := range []string{dt.Host, "localhost:" + dt.Port(), "127.0.0.1:" + dt.Port()} {
		text = replaceSocket(text, "ws://"+host+"/devtools/page/", base+"/page/", false)
		text = replaceSocket(text, "ws="+host+"/devtools/page/", param+"/page/", false)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = io.WriteString(w, text)
}

// devtoolsProtocol relays DevTools' /json/protocol (Selenoid lists it; CDP
// clients read the protocol's domains from it). It names no socket, so it
// passes as the browser sent it, up to maxDevToolsProtocol.
func (h *Hub) devtoolsProtocol(w http.ResponseWriter, r *http.Request, s *session.Session, dt *url.URL) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, dt.JoinPath("json/protocol").String(), nil)
	if err != nil {
		h.sideChannelDown(w, s, "DevTools", dt, err)
		return
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.sideChannelDown(w, s, "DevTools", dt, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		h.sideChannelDown(w, s, "DevTools", dt, fmt.Errorf("DevTools answered %d: %s", resp.StatusCode, webdriver.Truncate(data, 200)))
		return
	}
	if resp.ContentLength > maxDevToolsProtocol {
		h.sideChannelDown(w, s, "DevTools", dt, fmt.Errorf("its /json/protocol is %d bytes, over the hub's %d MiB bound", resp.ContentLength, maxDevToolsProtocol>>20))
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	_, _ = io.Copy(w, io.LimitReader(resp.Body, maxDevToolsProtocol))
}

// replaceSocket rewrites socket URLs in DevTools' JSON (written without its
// escaping of "/"). A browser socket keeps no id: the hub finds it again.
func replaceSocket(text, from, to string, dropID bool) string {
	for {
		i := strings.Index(text, from)
		if i < 0 {
			return text
		}
		end := i + len(from)
		if dropID {
			for end < len(text) && text[end] != '"' {
				end++
			}
		}
		text = text[:i] + to + text[end:]
	}
}

// wsBase is the hub's WebSocket base URL as the client reached it: the Host it
// used, or the one a reverse proxy in front says it used (X-Forwarded-Host),
// so that proxies stay in the path, and ws or wss. Only the asking client
// reads the answer, so what it claims misleads no one else.
func (h *Hub) wsBase(r *http.Request) string {
	scheme := "ws"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "wss"
	}
	host := r.Host
	if fh, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Host"), ","); httpguts.ValidHostHeader(strings.TrimSpace(fh)) && strings.TrimSpace(fh) != "" {
		host = strings.TrimSpace(fh) // the first proxy's
		// nginx's $host has no port; X-Forwarded-Port may say which.
		port, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Port"), ",")
		if _, _, err := net.SplitHostPort(host); err != nil { // no port given
			if p, err := strconv.Atoi(strings.TrimSpace(port)); err == nil && p > 0 && p < 65536 {
				host = net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(p))
			}
		}
	}
	return scheme + "://" + host
}

// bidi serves /session/{id}/se/bidi: the driver's WebDriver BiDi socket.
func (h *Hub) bidi(w http.ResponseWriter, r *http.Request) {
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	h.sessions.Done(s) // as for DevTools: the socket's traffic keeps the session alive
	if s.BiDiPath == "" {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation,
			fmt.Sprintf("session %s has no WebDriver BiDi socket: ask for it with the capability \"webSocketUrl\": true", s.ID))
		return
	}
	u := *s.URL()
	u.Path, u.RawPath = s.BiDiPath, ""
	h.proxySocket(w, r, s, &u)
}

// proxySocket proxies a WebSocket (or plain HTTP) request to target; the socket
// is closed when the session ends. A WebSocket counts against the side-channel
// caps, may be shed near the descriptor limit, and each read from its client
// restarts the session's idle timer: a client working through it is a client,
// a silent one does not hold the session for ever.
func (h *Hub) proxySocket(w http.ResponseWriter, r *http.Request, s *session.Session, target *url.URL) {
	path := "/" + strings.TrimPrefix(target.Path, "/") // JoinPath on an empty path leaves it relative
	// What a session's container or browser answers is the client's.
	sandboxed(w.Header())
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	client := &clientConn{}
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// Cancelling closes both sides of the tunnel.
		done := h.openSide(w, r, s, path, httpserver.ShedWorker, cancel)
		if done == nil {
			return
		}
		defer done()
		w = touchWriter{ResponseWriter: w, touch: h.toucher(s), client: client}
	}
	go func() {
		select {
		case <-s.Ended():
			cancel() // closes the driver's side
		case <-ctx.Done():
		}
		client.close() // and the client's, even if it has stopped reading
	}()
	logtag.Event(h.log, slog.LevelDebug, s.ID, "SIDE_CHANNEL", path)
	rp := &httputil.ReverseProxy{
		Transport: h.opts.Transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: target.Host, Path: path, RawQuery: pr.In.URL.RawQuery}
			pr.Out.Host = target.Host // DevTools accepts only an IP or localhost
			// Chrome refuses a socket with a foreign Origin; the hub is not one.
			pr.Out.Header.Del("Origin")
			pr.Out.Header.Del("Authorization")
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			h.sideChannelDown(w, s, "the side channel", target, err)
		},
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
}

func (h *Hub) sideChannelDown(w http.ResponseWriter, s *session.Session, what string, u *url.URL, err error) {
	select {
	case <-s.Ended():
		why, _ := h.sessions.Ended(s.ID)
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidSessionID, fmt.Sprintf("session %s has ended: %s", s.ID, why))
		return
	default:
	}
	webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnknownError,
		fmt.Sprintf("session %s: %s at %s did not answer: %v", s.ID, what, u.Host, err))
}

// bidiPath is the path of the driver's webSocketUrl in its new-session answer.
func bidiPath(caps json.RawMessage) string {
	var c struct {
		WebSocketURL any `json:"webSocketUrl"`
	}
	_ = json.Unmarshal(caps, &c)
	s, _ := c.WebSocketURL.(string)
	if u, err := url.Parse(s); err == nil && (u.Scheme == "ws" || u.Scheme == "wss") {
		return u.Path
	}
	return ""
}

// sideChannelCaps adds to a new session's capabilities what the client reaches
// through the hub: se:cdp (and se:cdpVersion) for a browser with DevTools,
// se:downloadsEnabled where /se/files serves its downloads, and webSocketUrl
// pointing at the hub's BiDi proxy.
func (h *Hub) sideChannelCaps(base string, s *session.Session, caps json.RawMessage) json.RawMessage {
	extra := map[string]any{}
	if s.Endpoints().DevTools != nil {
		extra["se:cdp"] = base + "/devtools/" + url.PathEscape(s.ID) + "/"
		var c struct {
			BrowserVersion string `json:"browserVersion"`
			Version        string `json:"version"`
		}
		_ = json.Unmarshal(caps, &c)
		extra["se:cdpVersion"] = c.BrowserVersion + c.Version
	}
	if s.Endpoints().Files != nil {
		// Grid 4's managed downloads (/se/files) are served, from the
		// hub's directory or the image's file server: Selenium's clients
		// look for this before they ask for a download.
		extra["se:downloadsEnabled"] = true
	}
	if s.BiDiPath != "" {
		extra["webSocketUrl"] = base + "/session/" + url.PathEscape(s.ID) + "/se/bidi"
	}
	if len(extra) == 0 {
		return caps
	}
	var m map[string]any
	if json.Unmarshal(caps, &m) != nil || m == nil {
		return caps
	}
	for k, v := range extra {
		m[k] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		return caps
	}
	return out
}
