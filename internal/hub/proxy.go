package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/gorilla/mux"

	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

type sessionKey struct{}

// proxyCommand forwards /session/{id}/… to the session's driver.
func (h *Hub) proxyCommand(w http.ResponseWriter, r *http.Request) {
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	defer h.sessions.Done(s)
	h.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
}

// deleteSession forwards DELETE to the driver, then ends the session: browser
// stopped, slot released, whatever the driver answered.
func (h *Hub) deleteSession(w http.ResponseWriter, r *http.Request) {
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.opts.SessionDeleteTimeout)
	rec := &captureWriter{header: http.Header{}}
	h.proxy.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, sessionKey{}, s)))
	cancel()
	h.sessions.Done(s)
	h.sessions.End(s.ID, session.ReasonDeleted)
	if rec.status == http.StatusOK {
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
		return
	}
	// The driver failed to quit cleanly; the browser is stopped anyway.
	writeJSON(w, http.StatusOK, map[string]any{"value": nil})
}

// begin looks up the request's session and holds its idle timer (release with
// sessions.Done); for an unknown session it answers invalid session id, saying
// why a recently ended one ended.
func (h *Hub) begin(w http.ResponseWriter, r *http.Request) (*session.Session, bool) {
	id := mux.Vars(r)["id"]
	if s, ok := h.sessions.Begin(id); ok {
		return s, true
	}
	msg := fmt.Sprintf("session %s is not known to this hub: it never existed here or ended long ago", id)
	if why, ok := h.sessions.Ended(id); ok {
		msg = fmt.Sprintf("session %s has ended: %s", id, why)
	}
	webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidSessionID, msg)
	return nil, false
}

// rewrite points a proxied request at the session's driver: the driver's base URL
// (browsers.json "path" included) plus everything from "/session/" on, escaping kept.
func (h *Hub) rewrite(pr *httputil.ProxyRequest) {
	s := pr.In.Context().Value(sessionKey{}).(*session.Session)
	base := s.URL()
	path := pr.In.URL.EscapedPath()
	if i := strings.Index(path, "/session/"); i >= 0 {
		path = path[i:]
	}
	out := *base
	out.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + path
	if p, err := url.PathUnescape(out.RawPath); err == nil {
		out.Path = p
	}
	out.RawQuery = pr.In.URL.RawQuery
	pr.Out.URL = &out
	pr.Out.Host = base.Host
}

// proxyError answers a command the driver did not answer: invalid session id if the
// browser is gone (and the session ends), unknown error otherwise; nothing to a
// client that left.
func (h *Hub) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	s := r.Context().Value(sessionKey{}).(*session.Session)
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	select {
	case <-s.Instance.Exited():
		h.sessions.End(s.ID, session.ReasonCrashed)
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidSessionID,
			fmt.Sprintf("session %s has ended: the browser exited (%s)", s.ID, s.Instance.ExitReason()))
		return
	default:
	}
	logtag.Event(h.log, slog.LevelWarn, s.ID, "PROXY_ERROR", r.Method+" "+r.URL.Path, err.Error())
	webdriver.WriteError(w, http.StatusBadGateway, webdriver.ErrUnknownError,
		fmt.Sprintf("session %s: the driver at %s did not answer %s %s: %v", s.ID, s.URL().Host, r.Method, r.URL.Path, err))
}

// captureWriter buffers a response so DELETE can end the session before answering.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
}
func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(p)
}
