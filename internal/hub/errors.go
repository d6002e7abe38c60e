package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// phase is a step of session creation; every creation error says in which one it
// failed.
type phase string

// The phases of POST /session, in order.
const (
	phaseParse    phase = "parse"    // read the body, parse the capabilities
	phaseResolve  phase = "resolve"  // find the browser in browsers.json and its launcher
	phaseCheck    phase = "check"    // ask the launcher whether a start can work now
	phaseAdmit    phase = "admit"    // wait in the queue for a slot and a start permit
	phaseStart    phase = "start"    // start the browser and the driver's session
	phaseRegister phase = "register" // hand the session to the registry
)

// createError is a failed session creation: the phase and its cause.
type createError struct {
	phase phase
	err   error
}

func (e *createError) Error() string { return string(e.phase) + ": " + e.err.Error() }
func (e *createError) Unwrap() error { return e.err }

// Causes of creation errors that have no type of their own.
var (
	// errClientGone: the client left; nothing is answered.
	errClientGone = errors.New("the client went away")
	// errShutDown: the grace period ended while the browser was starting.
	errShutDown = errors.New("the hub is shutting down and admits no new sessions; retry on another hub or after the restart")
	// errParseBusy: no share of readBudget or parseBudget came within parseWait.
	// errUserParseBusy: the user's own half of readBudget stayed held by
	// their other new-session bodies for parseWait.
	errUserParseBusy = fmt.Errorf("your other new-session bodies being read hold half of what the hub reads at once (%d MiB of %d), as much as one user may, and this one found no turn within %v; send them whole, or fewer at once", readBudget>>21, readBudget>>20, parseWait)
	errParseBusy     = fmt.Errorf("the hub is reading and parsing as many new-session bodies as it holds at once (%d MiB of bodies, %d MiB for their parses), and this one found no turn within %v; send it again", readBudget>>20, parseBudget>>20, parseWait)
)

// bodyError is a new-session body that could not be read to its end.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "reading the request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// originError is a new-session request a web page of another origin sent
// without a preflight: a browser adds Origin to a page's cross-origin POST,
// a WebDriver client never does. A page in a session's own browser, or in a
// developer's, could otherwise fill the grid (a no-cors text/plain POST
// needs no preflight).
type originError struct{ origin string }

func (e *originError) Error() string {
	return fmt.Sprintf("a web page of %.100q may not start sessions on this hub: WebDriver clients send no Origin header; a page may with Content-Type: application/json (which a browser sends cross-origin only after a preflight the hub does not grant) or from the hub's own origin", e.origin)
}

// fromOwnPage reports whether a new-session request that carries an Origin
// may go on: its body is declared JSON — a page of another origin cannot
// send that without a CORS preflight, which the hub never grants, so a
// browser that sent it is one the hub's own page, or a proxy's
// (selenoid-ui's "create session"), drove — or its Origin names the Host it
// came to, or the one a proxy in front says it came to.
func fromOwnPage(r *http.Request, origin string) bool {
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	own := withPort(u.Host, u.Scheme)
	for _, h := range []string{r.Host, r.Header.Get("X-Forwarded-Host")} {
		h, _, _ = strings.Cut(h, ",") // the first proxy's
		if h = strings.TrimSpace(h); h != "" && strings.EqualFold(withPort(h, u.Scheme), own) {
			return true
		}
	}
	return false
}

// withPort is host with the scheme's default port when it names none.
func withPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if scheme == "https" {
		return net.JoinHostPort(strings.Trim(host, "[]"), "443")
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}

// noLauncherError is a browsers.json entry this hub has no way to run.
type noLauncherError struct{ b config.Resolved }

func (e *noLauncherError) Error() string {
	return fmt.Sprintf("%s: \"image\" %q is a Docker image, but this hub runs without Docker (-disable-docker)", e.b, e.b.Image)
}

// refusal is the queue's refusal of a request.
type refusal struct{ out queue.Outcome }

func (e *refusal) Error() string { return e.out.Message() }

// reply is what a client gets for a failed creation, and what the hub logs.
type reply struct {
	status     int // 0: the client has left (see writeCreateError)
	code       string
	msg        string
	event      string // the log tag; "" when the queue has logged its own decision
	level      slog.Level
	retryAfter time.Duration // 0: no Retry-After header
}

// replyFor is the one place that turns an error of session creation into an
// answer: status, W3C error code, message, log tag and Retry-After. Every row of
// docs/hub.md's error table comes from here. A status is the one W3C gives the
// error code (500 for session not created), or the queue's 429: Python's
// Selenium takes only 400–500 for errors, and reads a 503's body as a session
// (KeyError: 'sessionId'); a Retry-After is a hint beside it.
func (h *Hub) replyFor(err error) reply {
	var (
		ce  *createError
		be  *bodyError
		oe  *originError
		tb  *http.MaxBytesError
		ae  *webdriver.ArgumentError
		nf  *config.NotFoundError
		nl  *noLauncherError
		rf  *refusal
		de  *webdriver.DriverError
		se  *launcher.StartError
		rep = reply{status: http.StatusInternalServerError, code: webdriver.ErrSessionNotCreated, msg: err.Error(), event: "SESSION_FAILED", level: slog.LevelWarn}
	)
	if errors.As(err, &ce) {
		rep.msg = ce.err.Error()
	}
	switch {
	case errors.Is(err, errClientGoneLogged):
		return reply{}
	case errors.As(err, &tb):
		return reply{status: http.StatusRequestEntityTooLarge, code: webdriver.ErrInvalidArgument, event: "BAD_REQUEST", level: slog.LevelInfo,
			msg: fmt.Sprintf("new session request body is larger than %d MiB; send smaller capabilities (large extensions belong on the browser image)", MaxNewSessionBody>>20)}
	case errors.As(err, &oe):
		return reply{status: http.StatusForbidden, code: webdriver.ErrSessionNotCreated, msg: oe.Error(), event: "BAD_REQUEST", level: slog.LevelInfo}
	case errors.As(err, &be):
		return reply{status: http.StatusBadRequest, code: webdriver.ErrInvalidArgument, event: "BAD_REQUEST", level: slog.LevelInfo,
			msg: be.Error() + "; the body must arrive whole (check the client's Content-Length or chunked encoding)"}
	case errors.Is(err, errClientGone), errors.Is(err, context.Canceled):
		what := "while sending the request"
		if ce != nil && ce.phase != phaseParse {
			what = "during the " + string(ce.phase) + " phase; what it held was released"
		}
		return reply{event: "CLIENT_DISCONNECTED", level: slog.LevelInfo, msg: what}
	case errors.As(err, &ae):
		return reply{status: http.StatusBadRequest, code: webdriver.ErrInvalidArgument, msg: ae.Msg, event: "BAD_REQUEST", level: slog.LevelInfo}
	case errors.As(err, &nf), errors.As(err, &nl):
		// Selenoid's answer, status, code and words, which clients' retry
		// logic treats as final; the details follow.
		return reply{status: http.StatusBadRequest, code: webdriver.ErrInvalidArgument, event: "ENVIRONMENT_NOT_AVAILABLE", level: slog.LevelInfo,
			msg: "Requested environment is not available: " + rep.msg}
	case errors.As(err, &rf):
		return h.refusalReply(rf.out)
	case errors.Is(err, errShutDown):
		rep.retryAfter = h.queue.RetryAfter()
	case errors.Is(err, errParseBusy), errors.Is(err, errUserParseBusy):
		return reply{status: http.StatusInternalServerError, code: webdriver.ErrSessionNotCreated, msg: err.Error(), event: "PARSE_BUSY", level: slog.LevelWarn, retryAfter: 10 * time.Second}
	case errors.As(err, &de):
		code, msg, ok := de.W3C()
		if !ok || de.Status < 400 || de.Status > 599 {
			// Only an error status is the client's to see: a 201, 206 or 302
			// with an error body is the driver's confusion, a failed start.
			break
		}
		// Above 500 (a driver's 502 or 503) is 500: what Python's Selenium
		// reads as an error.
		rep.status, rep.code = min(de.Status, http.StatusInternalServerError), code
		rep.msg = fmt.Sprintf("%s: the driver refused the new session: %s", de.Browser, msg)
	case errors.As(err, &se) && se.Down:
		// Try again later, or elsewhere: ggr moves on for any failure, and a
		// CI retry loop may read Retry-After.
		rep.retryAfter = h.queue.RetryAfter()
	}
	return rep
}

// refusalReply answers a queue refusal: 429 with Retry-After for no-wait, a full
// queue and the two budgets; 500 under -disable-queue (no queue, no budget ran
// out: a failed start on this host, which ggr may try elsewhere); 500 with
// Retry-After while the hub shuts down; nothing for a client that left. The
// queue has logged each, with the request id.
func (h *Hub) refusalReply(out queue.Outcome) reply {
	rep := reply{status: http.StatusTooManyRequests, code: webdriver.ErrSessionNotCreated, msg: out.Message(), retryAfter: out.RetryAfter}
	switch out.Reason {
	case queue.ReasonCancelled:
		return reply{}
	case queue.ReasonDisabled:
		rep.status, rep.retryAfter = StatusDisabled, 0
	case queue.ReasonClosed:
		rep.status = http.StatusInternalServerError
	}
	return rep
}

// writeCreateError logs a failed creation with its request id and answers it.
func (h *Hub) writeCreateError(w http.ResponseWriter, id string, err error) {
	rep := h.replyFor(err)
	if rep.event != "" {
		logtag.Event(h.log, rep.level, id, rep.event, logtag.Reason(rep.msg, true))
	}
	if rep.status == 0 {
		// The client is gone and reads nothing; should its connection be only
		// half-closed, it reads a W3C error rather than Go's implicit empty 200.
		msg := rep.msg
		if msg == "" {
			msg = "the client went away"
		}
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrSessionNotCreated, "client disconnected: "+msg)
		return
	}
	if rep.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(rep.retryAfter/time.Second)))
	}
	webdriver.WriteError(w, rep.status, rep.code, rep.msg)
}
