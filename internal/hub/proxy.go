package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/mux"
	"golang.org/x/net/http/httpguts"

	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

type sessionKey struct{}

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

// routed reports whether a session's path is an endpoint of the hub's own,
// served by the router, rather than a command passed to the driver.
// aerokube/… is Selenoid's vendor prefix, never a driver's: the router serves
// the aliases it has and passes any other to the driver as before.
func routed(rest string) bool {
	return rest == "se/bidi" || rest == "se/files" || strings.HasPrefix(rest, "aerokube/")
}

// proxyCommand is command for the router's /session/{id} and /session/{id}/.
func (h *Hub) proxyCommand(w http.ResponseWriter, r *http.Request) {
	h.command(w, r, mux.Vars(r)["id"])
}

// command forwards /session/{id}/… to the session's driver; escID is the id
// as escaped in the path.
func (h *Hub) command(w http.ResponseWriter, r *http.Request, escID string) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete:
	default:
		// WebDriver's commands are GET, POST and DELETE (and HEAD is GET's),
		// and a method is case-sensitive; a driver may read another as one
		// of them (chromedriver takes PUT, "post" and "Post" for POST), so
		// one the hub would not check as what it is goes no further: a PUT
		// upload passed every check of a POST one, and a "delete" of the
		// session quit the browser while the hub held its slot.
		w.Header().Set("Allow", "GET, HEAD, POST, DELETE")
		webdriver.WriteError(w, http.StatusMethodNotAllowed, webdriver.ErrUnknownMethod,
			fmt.Sprintf("%.32q is not a WebDriver method: commands are GET, POST or DELETE, in capitals", r.Method))
		return
	}
	id := escID
	if strings.IndexByte(id, '%') >= 0 {
		if u, err := url.PathUnescape(id); err == nil {
			id = u
		}
	}
	var sent func() // an upload's share of the budget, given back once its driver has it
	if isUpload(r) {
		// Before the session is held: a wait for the budget must not keep
		// the session, and its slot, from ending.
		var ok bool
		if sent, ok = h.uploadTurn(w, r); !ok {
			return
		}
		defer sent()
	} else if r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody {
		read, ok := h.sizeBody(w, r)
		if !ok {
			return
		}
		defer read()
	}
	s, ok := h.beginID(w, r, id)
	if !ok {
		return
	}
	held := true
	defer func() {
		if held {
			h.sessions.Done(s)
		}
	}()
	if r.Header.Get("Upgrade") != "" && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade") {
		if httpguts.HeaderValuesContainsToken(r.Header["Upgrade"], "websocket") {
			// A socket to the driver is a side channel: counted against the
			// caps, shed near the descriptor limit, closed when the session
			// ends, and not holding the idle timer. A command holds the timer
			// and is none of those, so no socket is opened through it
			// (chromedriver serves BiDi at /session/{id} itself).
			webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrUnknownCommand,
				fmt.Sprintf("%s %s asks for a WebSocket, which is not a WebDriver command: open WebDriver BiDi at /session/{id}/se/bidi, the webSocketUrl the hub answered, and Chrome DevTools at /devtools/{id}", r.Method, r.URL.Path))
			return
		}
		// Any other upgrade is an offer a command goes on without: Java's
		// HttpClient offers h2c on each new connection's first request, and
		// a server that does not take it answers in HTTP/1.1. Dropped here,
		// so that nothing is ever tunnelled through the command path.
		r.Header.Del("Upgrade")
		r.Header.Del("Http2-Settings")
		r.Header.Del("Connection")
	}
	ctx := context.WithValue(r.Context(), sessionKey{}, s)
	if sent != nil {
		r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxUploadSize)
		b, ok := h.checkUpload(w, r, sent) // the zip's decompressed size is bounded too
		if !ok {
			return
		}
		if s.WebKit { // WebKitWebDriver has no /file: the hub unpacks it, within the budget
			h.storeUpload(w, r, s)
			return
		}
		ctx = b.trace(ctx)
	}
	if r.Body != nil && r.Body != http.NoBody {
		wb := &watchedBody{ReadCloser: r.Body}
		r.Body = wb
		ctx = context.WithValue(ctx, watchedBodyKey{}, wb) // the proxy's error handler gets the body wrapped
	}
	var closed *bool // set by lastWindow, which the proxy runs on this goroutine
	if _, rest, _ := commandPath(r.URL.EscapedPath()); rest == "window" && r.Method == http.MethodDelete {
		closed = new(bool)
		ctx = context.WithValue(ctx, lastWindowKey{}, closed)
	}
	h.proxy.ServeHTTP(w, r.WithContext(ctx))
	if closed != nil && *closed {
		held = false
		h.sessions.Done(s)
		h.endBeforeAnswer(s, session.ReasonLastWindow)
	}
}

type lastWindowKey struct{}

// sizeBody reads a command body sent without its length (chunked, or
// HTTP/2 without Content-Length) whole, and gives the request its length:
// drivers take bodies of known length only (chromedriver drops a chunked
// one unanswered). It runs before the session is held (a slow body is
// bounded by -body-read-timeout). The first 64 KiB are read freely, as a
// new-session body's; a larger body takes a share of the same read budget,
// up to MaxNewSessionBody, held until the returned function is called (once
// the driver has it). It reports whether the request may go on; if not, it
// has answered.
func (h *Hub) sizeBody(w http.ResponseWriter, r *http.Request) (func(), bool) {
	give := func() {}
	body, err := io.ReadAll(io.LimitReader(r.Body, freeBody+1))
	if err == nil && len(body) > freeBody {
		clock, _ := r.Body.(bodyClock)
		if clock != nil {
			clock.PauseTimeout()
		}
		ctx, cancel := context.WithTimeout(r.Context(), parseWait)
		give, err = h.reads.take(ctx, userOf(r), MaxNewSessionBody)
		cancel()
		if clock != nil {
			clock.RestartTimeout()
		}
		if err != nil {
			_ = r.Body.Close()
			if r.Context().Err() == nil {
				w.Header().Set("Retry-After", "10")
				webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnknownError,
					fmt.Sprintf("%s %s came without Content-Length, and the hub reads such a body whole first: it is reading as many large bodies as it holds at once (%d MiB), and this one found no turn within %v; send it with Content-Length, or again", r.Method, r.URL.Path, readBudget>>20, parseWait))
			}
			return nil, false
		}
		var more []byte
		more, err = io.ReadAll(io.LimitReader(r.Body, MaxNewSessionBody+1-int64(len(body))))
		body = append(body, more...)
	}
	_ = r.Body.Close()
	switch {
	case err != nil:
		give()
		bodyBrokeOff(w, r, err)
		return nil, false
	case len(body) > MaxNewSessionBody:
		give()
		webdriver.WriteError(w, http.StatusRequestEntityTooLarge, webdriver.ErrInvalidArgument,
			fmt.Sprintf("%s %s came without Content-Length (chunked) and is over %d MiB: the hub reads such a body whole to tell the driver its length, up to that bound; send it with Content-Length", r.Method, r.URL.Path, MaxNewSessionBody>>20))
		return nil, false
	}
	r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return give, true
}

// modifyResponse is the proxy's ModifyResponse: it notes a driver's answer
// that ends the session (lastWindow, driverEnded). Every answer passes on
// with its status and body unchanged, sandboxed.
func (h *Hub) modifyResponse(resp *http.Response) error {
	if resp.Request == nil {
		return nil
	}
	// The driver's port is in the client's container: what answers there
	// may be anything, opened on the hub's origin.
	sandboxed(resp.Header)
	if resp.StatusCode == http.StatusNotFound {
		return h.driverEnded(resp)
	}
	return h.lastWindow(resp)
}

// driverEnded ends the session whose driver answered a command that it has
// no such session (chromedriver and WebKitWebDriver end theirs on a page
// crash or hang, and live on): the slot is free at once, not at the idle
// timeout. The end runs beside the answer, which passes on as the driver
// gave it.
func (h *Hub) driverEnded(resp *http.Response) error {
	s, ok := resp.Request.Context().Value(sessionKey{}).(*session.Session)
	if !ok {
		return nil
	}
	b := peekBody(resp)
	var v struct {
		Value struct {
			Error string `json:"error"`
		} `json:"value"`
	}
	if json.Unmarshal(b, &v) == nil && v.Value.Error == webdriver.ErrInvalidSessionID {
		go h.sessions.End(s, session.ReasonDriverEnded)
	}
	return nil
}

// peekMost bounds what modifyResponse reads of an answer before passing it
// on: {"value":[]}, or an error with its message, with room for spaces; a
// longer answer is read no further, and is neither.
const peekMost = 4096

// peekBody reads the start of resp's body, at most peekMost bytes, and puts
// it back in front of the rest; nil if the body is longer or unreadable.
func peekBody(resp *http.Response) []byte {
	b, err := io.ReadAll(io.LimitReader(resp.Body, peekMost))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	if err != nil || len(b) >= peekMost {
		return nil
	}
	return b
}

// lastWindow notes a Close Window that
// closed the browser's last window: a W3C driver then ends its session
// (its answer is the empty list of the windows left), and the hub ends the
// session too, as Grid does, rather than hold the slot until the idle
// timeout. The answer passes on unchanged.
func (h *Hub) lastWindow(resp *http.Response) error {
	if resp.Request == nil || resp.Request.Method != http.MethodDelete || resp.StatusCode != http.StatusOK {
		return nil
	}
	closed, ok := resp.Request.Context().Value(lastWindowKey{}).(*bool)
	if !ok {
		return nil
	}
	b := peekBody(resp)
	var v struct {
		Value *[]json.RawMessage `json:"value"`
	}
	if b != nil && json.Unmarshal(b, &v) == nil && v.Value != nil && len(*v.Value) == 0 {
		*closed = true
	}
	return nil
}

// endBeforeAnswer ends s, whose caller holds it no longer, and returns once
// it is out of the registry: a command after the answer gets invalid session
// id, while the teardown (browser processes, the container) runs on, holding
// the slot until it is done.
func (h *Hub) endBeforeAnswer(s *session.Session, reason string) {
	removed := make(chan struct{})
	go func() {
		if !h.sessions.EndThen(s, reason, func() { close(removed) }) {
			close(removed) // another end path (idle timeout, crash) took it meanwhile
		}
	}()
	<-removed
}

// bodyClock is a request body whose arrival is timed (the server's
// -body-read-timeout), with its clock stopped and started again.
type bodyClock interface {
	PauseTimeout()
	RestartTimeout()
}

// isUpload reports a file upload: Selenium 4's /se/file or the legacy /file.
func isUpload(r *http.Request) bool {
	p := r.URL.Path
	return r.Method == http.MethodPost && (strings.HasSuffix(p, "/se/file") || strings.HasSuffix(p, "/file"))
}

func (h *Hub) uploadTooLarge() string {
	return fmt.Sprintf("the file upload is larger than -max-upload-size %d MiB; send a smaller file or raise the limit", h.opts.MaxUploadSize>>20)
}

// maxDeleteAnswer bounds the driver's answer to DELETE that is passed on; a
// real one is {"value":null}.
const maxDeleteAnswer = 1 << 20

// deleteSession forwards DELETE to the driver, then ends the session: browser
// stopped, slot released, whatever the driver answered, however it broke off.
func (h *Hub) deleteSession(w http.ResponseWriter, r *http.Request) {
	if reason, owner, ok := h.sessions.EndedReason(pathID(r)); ok && (reason == session.ReasonLastWindow || reason == session.ReasonDriverEnded) && h.mayKnow(r, owner) {
		// driver.close() then driver.quit(), common in teardown code: the
		// session ended with its last window, and quitting it is done; so
		// for a session its driver ended (a page crash), whose quit the
		// driver itself would have refused and the hub answered 200.
		writeJSON(w, http.StatusOK, map[string]any{"value": nil})
		return
	}
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	ended := false
	defer func() { // every exit, a panic included, releases what DELETE holds
		if !ended {
			h.sessions.Done(s)
			h.sessions.End(s, session.ReasonDeleted)
		}
	}()
	status, body := h.forwardDelete(r, s)
	if status != http.StatusOK || !json.Valid(body) {
		// The driver failed to quit cleanly; the browser is stopped anyway.
		status, body = http.StatusOK, []byte(`{"value":null}`)
	}
	h.sessions.Done(s)
	ended = true
	// The answer waits until the session is no longer found, so no command
	// reaches a dying browser.
	h.endBeforeAnswer(s, session.ReasonDeleted)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// forwardDelete sends DELETE /session/{id} to the driver, within
// -session-delete-timeout even if the client leaves, and reads a bounded answer.
// Any failure (no answer, a body that breaks off or is too large) is status 0.
func (h *Hub) forwardDelete(r *http.Request, s *session.Session) (status int, body []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.opts.SessionDeleteTimeout)
	defer cancel()
	status, body, err := h.driverCall(ctx, http.MethodDelete, s.URL().JoinPath("session", s.ID), nil, maxDeleteAnswer)
	switch {
	case errors.Is(err, errTooLarge), errors.Is(err, errAnswerBroken):
		logtag.Event(h.log, slog.LevelWarn, s.ID, "PROXY_ERROR", "DELETE", fmt.Sprintf("the driver's answer broke off or exceeds %d bytes: %v", maxDeleteAnswer, err))
		return 0, nil
	case err != nil:
		logtag.Event(h.log, slog.LevelWarn, s.ID, "PROXY_ERROR", "DELETE", err.Error())
		return 0, nil
	}
	return status, body
}

// begin looks up the request's session and holds its idle timer (release with
// sessions.Done); for an unknown session it answers invalid session id, saying
// why a recently ended one ended.
func (h *Hub) begin(w http.ResponseWriter, r *http.Request) (*session.Session, bool) {
	return h.beginID(w, r, pathID(r))
}

// pathID is the session id of a route's {id}. Routes match the escaped
// path; the registry holds the driver's id as is.
func pathID(r *http.Request) string {
	id, err := url.PathUnescape(mux.Vars(r)["id"])
	if err != nil {
		return mux.Vars(r)["id"]
	}
	return id
}

// beginID is begin for a session id the caller has already read.
func (h *Hub) beginID(w http.ResponseWriter, r *http.Request, id string) (*session.Session, bool) {
	if s, ok := h.sessions.Begin(id); ok {
		if h.sees(r, s) {
			return s, true
		}
		// Another user's session: answered exactly as an unknown one, so its
		// existence is not told either.
		h.sessions.Done(s)
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidSessionID,
			fmt.Sprintf("session %s is not known to this hub: it never existed here or ended long ago", id))
		return nil, false
	}
	msg := fmt.Sprintf("session %s is not known to this hub: it never existed here or ended long ago", id)
	if why, owner, ok := h.sessions.EndedOwned(id); ok && h.mayKnow(r, owner) {
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
	if strings.HasSuffix(path, "/se/file") && pr.In.Method == http.MethodPost {
		// Selenium 4 uploads to /se/file, which chromedriver does not know; its
		// /file takes the same body (as Selenoid rewrites it).
		path = strings.TrimSuffix(path, "/se/file") + "/file"
	}
	out := *base
	out.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + path
	if p, err := url.PathUnescape(out.RawPath); err == nil {
		out.Path = p
	}
	out.RawQuery = pr.In.URL.RawQuery
	pr.Out.URL = &out
	pr.Out.Host = base.Host
	// The client's credentials are for the hub, not for the browser.
	pr.Out.Header.Del("Authorization")
	// The hub's server has told the client to go on with its body already;
	// a driver that ignores Expect would otherwise stall each such command
	// for the Transport's ExpectContinueTimeout.
	pr.Out.Header.Del("Expect")
}

// connectionLost reports an error of a connection the driver's side ended:
// what a browser killed under a command leaves, not a malformed answer.
func connectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// proxyError answers a command the driver did not answer: invalid session id if the
// browser is gone (and the session ends), unknown error otherwise; nothing to a
// client that left.
func (h *Hub) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	h.commandError(w, r, r.Context().Value(sessionKey{}).(*session.Session), err)
}

// commandError is proxyError for a session the caller holds.
func (h *Hub) commandError(w http.ResponseWriter, r *http.Request, s *session.Session, err error) {
	if wb, ok := r.Context().Value(watchedBodyKey{}).(*watchedBody); ok {
		if wb.broke() == nil && r.Context().Err() != nil {
			// The connection's read failed (a client that left, or one
			// that half-closed with its body unsent) before the proxy read
			// the body: what is left of it, already come or never to
			// come, tells which.
			_, _ = io.Copy(io.Discard, io.LimitReader(wb, 1<<20))
		}
		if berr := wb.broke(); berr != nil {
			bodyBrokeOff(w, r, berr)
			return
		}
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		webdriver.WriteError(w, http.StatusRequestEntityTooLarge, webdriver.ErrInvalidArgument, h.uploadTooLarge())
		return
	}
	if r.Context().Err() != nil {
		return // the client left: nobody reads an answer, and the driver is not to blame
	}
	if connectionLost(err) {
		// A browser killed under a command drops the connection before its
		// exit is seen (a container's die event comes after): wait a moment
		// for it, so the command in flight is told what the next one would.
		t := time.NewTimer(h.opts.ExitGrace)
		select {
		case <-s.Instance.Exited():
		case <-s.Ended():
		case <-r.Context().Done():
		case <-t.C:
		}
		t.Stop()
	}
	select {
	case <-s.Instance.Exited():
		h.sessions.End(s, session.ReasonCrashed)
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidSessionID,
			fmt.Sprintf("session %s has ended: the browser exited (%s)", s.ID, s.Instance.ExitReason()))
		return
	case <-s.Ended():
		// Ended while the command was in flight (DELETE, lifetime, shutdown): its
		// driver is gone, and that is what the client must hear.
		why, _ := h.sessions.Ended(s.ID)
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidSessionID,
			fmt.Sprintf("session %s has ended: %s", s.ID, why))
		return
	default:
	}
	logtag.Event(h.log, slog.LevelWarn, s.ID, "PROXY_ERROR", r.Method+" "+r.URL.Path, err.Error())
	// W3C's status for unknown error: Python's Selenium would return a 502's
	// error body as the command's value, and the test would go on.
	webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnknownError,
		fmt.Sprintf("session %s: the driver at %s did not answer %s %s: %v", s.ID, s.URL().Host, r.Method, r.URL.Path, err))
}

type watchedBodyKey struct{}

// watchedBody is a command's body on its way to the driver, keeping the
// error that broke it off, if any: Go's server then cancels the request's
// context, and the proxy's error would read as a client that left.
type watchedBody struct {
	io.ReadCloser
	mu  sync.Mutex
	err error
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// broke is the error that broke the body off; nil if none did.
func (b *watchedBody) broke() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// bodyBrokeOff answers a request whose body broke off (stalled past
// -body-read-timeout, cut short, malformed chunks): 400, and the connection
// closed after it. Go's server cancels the request's context then, as it
// does for a client that left, so the hub answers whatever the context
// says (to a client that left, the answer goes nowhere): answering nothing
// sent an empty 200, which a client takes for the command's success. The
// connection closes, so that nothing of the body that comes after is read
// as a request of its own.
func bodyBrokeOff(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Connection", "close")
	webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument,
		fmt.Sprintf("the body of %s %s broke off: %v; send it whole", r.Method, r.URL.Path, err))
}
