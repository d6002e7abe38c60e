package hub

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/websummoner/websummoner/internal/webdriver"
)

// The per-command path. Every WebDriver command of every test goes through
// here, so it skips the router (two prefixes of regex routes), ReverseProxy's
// request clone and header rewrites, and context values: the session is found
// by a direct lookup of the id in the path, and the request to the driver is
// built once, sharing the client's header values. Everything that is not a
// plain command — creation, DELETE, side channels, uploads, WebSocket
// upgrades — goes through the router as before.

// commandPath splits /session/{id}/{rest} or /wd/hub/session/{id}/{rest} into
// the escaped id and rest; ok is false for anything else.
func commandPath(path string) (id, rest string, ok bool) {
	p, found := strings.CutPrefix(path, "/wd/hub/session/")
	if !found {
		if p, found = strings.CutPrefix(path, "/session/"); !found {
			return "", "", false
		}
	}
	id, rest, found = strings.Cut(p, "/")
	if !found || id == "" || rest == "" {
		return "", "", false
	}
	return id, rest, true
}

// fastCommand reports whether a request is a plain command the fast path
// serves; the router serves the rest.
func fastCommand(r *http.Request, rest string) bool {
	if r.Header.Get("Upgrade") != "" {
		return false
	}
	switch {
	case strings.HasPrefix(rest, "se/"), strings.HasPrefix(rest, "aerokube/"):
		return false // BiDi, Grid files, uploads, Selenoid downloads
	case r.Method == http.MethodPost && (rest == "file" || strings.HasSuffix(rest, "/file")):
		return false // uploads: bounded by -max-upload-size on the router's path
	}
	return true
}

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copyBufs are the 32 KiB buffers answers are copied through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// serveCommand proxies one command to its session's driver. id is escaped, as
// in the path. It reports whether the driver's answer was relayed whole with
// its length declared: then the connection may become a lane (lane.go).
func (h *Hub) serveCommand(w http.ResponseWriter, r *http.Request, escID string) bool {
	id := escID
	if strings.IndexByte(id, '%') >= 0 {
		if u, err := url.PathUnescape(id); err == nil {
			id = u
		}
	}
	s, ok := h.beginID(w, r, id)
	if !ok {
		return false
	}
	defer h.sessions.Done(s)
	h.opts.Load.Begin()
	defer h.opts.Load.End()
	base := s.URL()
	path := r.URL.EscapedPath()
	if i := strings.Index(path, "/session/"); i >= 0 {
		path = path[i:]
	}
	escPath := path
	if base.Path != "" && base.Path != "/" {
		escPath = strings.TrimSuffix(base.EscapedPath(), "/") + path
	}
	ctx := r.Context()
	if h.wire != nil && r.ContentLength >= 0 && r.ContentLength <= wireMaxBody {
		var body []byte
		if r.ContentLength > 0 {
			body = make([]byte, r.ContentLength)
			if _, err := io.ReadFull(r.Body, body); err != nil {
				webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument, "reading the command's body: "+err.Error())
				return false
			}
		}
		uri := escPath
		if r.URL.RawQuery != "" {
			uri += "?" + r.URL.RawQuery
		}
		if err := h.wire.do(ctx, w, r.Method, base.Host, uri, r.Header, nil, body); err != nil {
			h.commandError(w, r, s, err)
			return false
		}
		_, whole := w.Header()["Content-Length"]
		return whole && ctx.Err() == nil
	}
	target := &url.URL{Scheme: base.Scheme, Host: base.Host, RawQuery: r.URL.RawQuery, RawPath: escPath, Path: escPath}
	if strings.IndexByte(escPath, '%') >= 0 {
		if p, err := url.PathUnescape(escPath); err == nil {
			target.Path = p
		}
	} else {
		target.RawPath = ""
	}
	out := &http.Request{
		Method: r.Method, URL: target, Host: base.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(r.Header)), ContentLength: r.ContentLength,
	}
	if r.ContentLength != 0 {
		out.Body = r.Body
	}
	for k, v := range r.Header {
		if !hopHeaders[k] && k != "Authorization" {
			out.Header[k] = v // shared, never changed
		}
	}
	if _, set := out.Header["User-Agent"]; !set {
		out.Header["User-Agent"] = nil // as ReverseProxy: no Go default
	}
	resp, err := h.opts.Transport.RoundTrip(out.WithContext(ctx))
	if err != nil {
		h.commandError(w, r, s, err)
		return false
	}
	defer resp.Body.Close()
	hdr := w.Header()
	for k, v := range resp.Header {
		if !hopHeaders[k] {
			hdr[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	buf := copyBufs.Get().(*[]byte)
	_, err = io.CopyBuffer(writerOnly{w}, resp.Body, *buf)
	copyBufs.Put(buf)
	if err != nil && ctx.Err() == nil {
		// The driver's answer broke off: the client must not take it as whole.
		panic(http.ErrAbortHandler)
	}
	return false // the Transport's path: no lane, which needs the wire
}

// writerOnly hides the ResponseWriter's ReadFrom, so the copy uses the pooled
// buffer instead of allocating its own.
type writerOnly struct{ io.Writer }
