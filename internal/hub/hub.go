// Package hub serves the WebDriver endpoints: it creates sessions through the
// queue and a launcher, proxies every command to the session's driver, ends
// sessions, and reports status.
package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/queuehttp"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// MaxNewSessionBody is the largest new-session body accepted. Capabilities can
// carry base64 browser extensions of several megabytes; 32 MiB leaves room for
// those and still refuses a runaway upload before it is held in memory.
const MaxNewSessionBody = 32 << 20

// Options configure the hub. Zero durations mean "none" except where noted.
type Options struct {
	// IdleTimeout is -timeout: a session with no command for this long ends.
	IdleTimeout time.Duration
	// MaxTimeout is -max-timeout: the most a client's sessionTimeout may ask for.
	MaxTimeout time.Duration
	// SessionAttemptTimeout is -session-attempt-timeout: the driver's new-session
	// call, per attempt.
	SessionAttemptTimeout time.Duration
	// SessionDeleteTimeout is -session-delete-timeout: forwarding DELETE, and
	// stopping the browser.
	SessionDeleteTimeout time.Duration
	// RetryCount is -retry-count: attempts to start a browser for one request (≥ 1).
	RetryCount int
	// GracefulRetryAfter is the Retry-After sent while draining; zero means 30s.
	GracefulRetryAfter time.Duration
	// Version is reported by /ping and /status.
	Version string
	// Metrics serves /metrics; nil serves 404.
	Metrics http.Handler
	// Gate reports the start gate's state for /status; nil shows none.
	Gate func() any
}

// Launchers are the ways to start a browser; an entry's "image" picks one.
type Launchers struct {
	// Process runs command-line "image" entries.
	Process launcher.Launcher
	// Docker runs image-name entries; nil while the hub runs with -disable-docker.
	Docker launcher.Launcher
}

// Hub is the HTTP side of WebSummoner.
type Hub struct {
	opts      Options
	log       *slog.Logger
	queue     *queue.Queue
	conf      *config.Store
	launchers Launchers
	sessions  *session.Registry
	proxy     *httputil.ReverseProxy
	client    *http.Client
	router    *mux.Router
	m         *metrics

	started  time.Time
	requests atomic.Uint64
	reqIDs   atomic.Uint64
	pending  atomic.Int64
	draining atomic.Bool
}

// New builds a hub from its parts.
func New(opts Options, q *queue.Queue, conf *config.Store, ls Launchers, sessions *session.Registry, logger *slog.Logger, reg prometheus.Registerer) (*Hub, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.RetryCount < 1 {
		opts.RetryCount = 1
	}
	if opts.GracefulRetryAfter <= 0 {
		opts.GracefulRetryAfter = 30 * time.Second
	}
	h := &Hub{opts: opts, log: logger, queue: q, conf: conf, launchers: ls, sessions: sessions, started: time.Now()}
	// One transport for every driver: many hosts, each with a few live connections.
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // a command may legitimately run long (executeAsyncScript)
		ForceAttemptHTTP2:     false,
	}
	h.client = &http.Client{Transport: transport}
	h.proxy = &httputil.ReverseProxy{
		Rewrite:       h.rewrite,
		Transport:     transport,
		ErrorHandler:  h.proxyError,
		FlushInterval: -1,
		BufferPool:    &bufferPool{},
	}
	var err error
	if h.m, err = newMetrics(h, reg); err != nil {
		return nil, err
	}
	h.router = h.routes()
	return h, nil
}

// ServeHTTP serves every endpoint.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	h.router.ServeHTTP(w, r)
}

func (h *Hub) routes() *mux.Router {
	r := mux.NewRouter()
	r.UseEncodedPath()
	for _, prefix := range []string{"/wd/hub", ""} {
		sr := r.PathPrefix(prefix).Subrouter()
		if prefix == "" {
			sr = r
		}
		sr.HandleFunc("/session", h.createSession).Methods(http.MethodPost)
		sr.HandleFunc("/session", methodNotAllowed)
		sr.HandleFunc("/session/{id}", h.deleteSession).Methods(http.MethodDelete)
		sr.HandleFunc("/session/{id}", h.proxyCommand)
		sr.PathPrefix("/session/{id}/").HandlerFunc(h.proxyCommand)
	}
	r.HandleFunc("/wd/hub/status", h.w3cStatus).Methods(http.MethodGet)
	r.HandleFunc("/status", h.selenoidStatus).Methods(http.MethodGet)
	r.HandleFunc("/ping", h.ping).Methods(http.MethodGet)
	r.HandleFunc("/healthz", h.healthz).Methods(http.MethodGet)
	r.HandleFunc("/readyz", h.readyz).Methods(http.MethodGet)
	if h.opts.Metrics != nil {
		r.Handle("/metrics", h.opts.Metrics)
	}
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrUnknownCommand,
			fmt.Sprintf("%s %s is not a WebDriver endpoint of this hub", r.Method, r.URL.Path))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(methodNotAllowed)
	return r
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	webdriver.WriteError(w, http.StatusMethodNotAllowed, webdriver.ErrUnknownMethod,
		fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
}

// Drain stops admitting new sessions and waits, until ctx ends, for the live ones
// to finish; then it ends the rest. Requests already queued are refused as they
// would be on arrival.
func (h *Hub) Drain(ctx context.Context) {
	h.draining.Store(true)
	h.queue.Close()
	logtag.Event(h.log, slog.LevelInfo, "", "DRAINING", fmt.Sprintf("%d sessions", h.sessions.Len()))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for h.sessions.Len() > 0 || h.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			h.sessions.EndAll(session.ReasonShutdown)
			return
		case <-tick.C:
		}
	}
	h.sessions.EndAll(session.ReasonShutdown)
}

// Draining reports whether Drain has begun.
func (h *Hub) Draining() bool { return h.draining.Load() }

func (h *Hub) writeDraining(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(int(h.opts.GracefulRetryAfter/time.Second)))
	webdriver.WriteError(w, http.StatusServiceUnavailable, webdriver.ErrSessionNotCreated,
		"the hub is shutting down and admits no new sessions; retry on another hub or after the restart")
}

// createSession is POST /session: parse, resolve, queue, start, forward.
func (h *Hub) createSession(w http.ResponseWriter, r *http.Request) {
	id := strconv.FormatUint(h.reqIDs.Add(1), 10)
	logtag.Event(h.log, slog.LevelInfo, id, "NEW_REQUEST", r.RemoteAddr)
	if h.draining.Load() {
		h.writeDraining(w)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxNewSessionBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			webdriver.WriteError(w, http.StatusRequestEntityTooLarge, webdriver.ErrInvalidArgument,
				fmt.Sprintf("new session request body is larger than %d MiB; send smaller capabilities (large extensions belong on the browser image)", MaxNewSessionBody>>20))
			return
		}
		logtag.Event(h.log, slog.LevelInfo, id, "CLIENT_DISCONNECTED", "while sending the request: "+err.Error())
		return
	}
	ns, err := webdriver.ParseNewSession(body)
	var cands []webdriver.Candidate
	if err == nil {
		cands, err = ns.Candidates()
	}
	if err != nil {
		logtag.Event(h.log, slog.LevelInfo, id, "BAD_REQUEST", err.Error())
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument, err.Error())
		return
	}
	cand, browser, err := h.resolve(cands)
	if err != nil {
		logtag.Event(h.log, slog.LevelInfo, id, "ENVIRONMENT_NOT_AVAILABLE", err.Error())
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrSessionNotCreated, err.Error())
		return
	}
	l := h.launchers.Process
	if !browser.Image.IsCommand() {
		l = h.launchers.Docker
	}
	if l == nil {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrSessionNotCreated,
			fmt.Sprintf("%s %s: \"image\" %q is a Docker image, but this hub runs without Docker (-disable-docker)", browser.Name, browser.Version, browser.Image))
		return
	}
	if c, ok := l.(launcher.Checker); ok {
		// Fail at once, before taking a slot or queueing, when the start is doomed.
		if err := c.Check(r.Context(), browser); err != nil {
			h.countFailure(browser, err)
			logtag.Event(h.log, slog.LevelWarn, id, "SESSION_FAILED", err.Error())
			status := http.StatusInternalServerError
			var se *launcher.StartError
			if errors.As(err, &se) && se.Engine {
				status = http.StatusServiceUnavailable
			}
			webdriver.WriteError(w, status, webdriver.ErrSessionNotCreated, err.Error())
			return
		}
	}
	slot, ok := queuehttp.Admitter{Queue: h.queue}.Admit(w, r, id)
	if !ok {
		return
	}
	if h.draining.Load() {
		slot.Release()
		h.writeDraining(w)
		return
	}
	h.pending.Add(1)
	res, err := h.start(r.Context(), id, l, ns.W3C, cand, browser)
	h.pending.Add(-1)
	slot.Started(startOutcome(r.Context(), err))
	if err != nil {
		slot.Release()
		h.writeStartError(w, r, id, browser, err)
		return
	}
	s := &session.Session{
		ID: res.id, Browser: browser.Name, Version: browser.Version, Name: cand.Options.Name,
		Caps: cand.Caps, Started: time.Now(), Instance: res.inst, Idle: h.idleFor(cand.Options),
	}
	if err := h.sessions.Add(s, slot); err != nil {
		h.stop(res.inst)
		slot.Release()
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrSessionNotCreated, err.Error())
		return
	}
	if n, ok := res.inst.(interface{ SetSessionID(string) }); ok {
		n.SetSessionID(res.id)
	}
	h.m.created.Inc()
	if r.Context().Err() != nil {
		// Created after the client left: nobody will ever delete it.
		h.sessions.End(res.id, session.ReasonClientGone)
		return
	}
	logtag.Event(h.log, slog.LevelInfo, id, "SESSION_CREATED", res.id, browser.Name+" "+browser.Version, res.inst.Describe(),
		fmt.Sprintf("%.3fs", res.took.Seconds()))
	writeJSON(w, http.StatusOK, sessionResponse(ns.W3C, res.id, res.caps))
}

// resolve picks the first candidate whose browser is configured.
func (h *Hub) resolve(cands []webdriver.Candidate) (webdriver.Candidate, config.Resolved, error) {
	browsers := h.conf.Browsers()
	var firstErr error
	for _, c := range cands {
		if c.Browser == "" {
			if firstErr == nil {
				firstErr = fmt.Errorf("no browserName (or deviceName) in the capabilities; configured: %s", describe(browsers))
			}
			continue
		}
		b, err := browsers.Find(c.Browser, c.Version)
		if err == nil {
			return c, b, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return webdriver.Candidate{}, config.Resolved{}, firstErr
}

func describe(bs config.Browsers) string {
	var out []byte
	for i, n := range bs.Names() {
		if i > 0 {
			out = append(out, "; "...)
		}
		out = fmt.Appendf(out, "%s (%v)", n, bs.VersionsOf(n))
	}
	return string(out)
}

func (h *Hub) idleFor(o webdriver.Options) time.Duration {
	if o.SessionTimeout > 0 {
		if h.opts.MaxTimeout > 0 && o.SessionTimeout > h.opts.MaxTimeout {
			return h.opts.MaxTimeout
		}
		return o.SessionTimeout
	}
	return h.opts.IdleTimeout
}

type started struct {
	id   string
	caps any
	inst launcher.Instance
	took time.Duration
}

// driverError is a new-session error answered by the driver itself, passed to
// the client as the driver said it.
type driverError struct {
	status int
	body   []byte
}

func (e *driverError) Error() string { return fmt.Sprintf("driver answered %d: %s", e.status, e.body) }

// start launches a browser and creates the driver's session, up to -retry-count
// times. Whatever fails on the way is stopped before it returns.
func (h *Hub) start(ctx context.Context, id string, l launcher.Launcher, w3c bool, c webdriver.Candidate, b config.Resolved) (started, error) {
	body := webdriver.DriverBody(c, w3c, b.Caps)
	var lastErr error
	t0 := time.Now()
	for attempt := 1; attempt <= h.opts.RetryCount; attempt++ {
		if attempt > 1 {
			logtag.Event(h.log, slog.LevelInfo, id, "RETRYING", fmt.Sprintf("attempt %d of %d (-retry-count)", attempt, h.opts.RetryCount), lastErr)
		}
		inst, err := l.Start(ctx, launcher.Request{ID: id, Browser: b, Options: c.Options})
		if err != nil {
			if ctx.Err() != nil {
				return started{}, ctx.Err()
			}
			h.countFailure(b, err)
			lastErr = err
			continue
		}
		sid, caps, err := h.newDriverSession(ctx, inst, body, b)
		if err == nil {
			took := time.Since(t0)
			h.m.startSeconds.WithLabelValues(b.Name, b.Version).Observe(took.Seconds())
			return started{id: sid, caps: caps, inst: inst, took: took}, nil
		}
		h.stop(inst)
		if ctx.Err() != nil {
			return started{}, ctx.Err()
		}
		lastErr = err
		var de *driverError
		if errors.As(err, &de) && de.status < 500 {
			return started{}, err // the client's capabilities were refused: retrying won't help
		}
		h.countFailure(b, err)
	}
	return started{}, lastErr
}

// startOutcome classifies a start for the start gate: the engine's or host's
// failures count, the client's (bad capabilities, leaving) do not.
func startOutcome(ctx context.Context, err error) queue.StartOutcome {
	if err == nil {
		return queue.StartSucceeded
	}
	if ctx.Err() != nil {
		return queue.StartIgnored
	}
	var se *launcher.StartError
	if errors.As(err, &se) && se.Engine {
		return queue.StartFailed
	}
	var de *driverError
	if errors.As(err, &de) && de.status >= 500 {
		return queue.StartFailed
	}
	return queue.StartIgnored
}

func (h *Hub) countFailure(b config.Resolved, err error) {
	phase := launcher.PhaseNewSession
	var se *launcher.StartError
	if errors.As(err, &se) {
		phase = se.Phase
	}
	h.m.startFailures.WithLabelValues(b.Name, phase).Inc()
}

// newDriverSession forwards the new-session body to a started driver.
func (h *Hub) newDriverSession(ctx context.Context, inst launcher.Instance, body []byte, b config.Resolved) (string, any, error) {
	name := b.Name + " " + b.Version
	ctx, cancel := context.WithTimeout(ctx, h.opts.SessionAttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, inst.URL().JoinPath("session").String(), bytes.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := h.client.Do(req)
	if err != nil {
		msg := fmt.Sprintf("the driver did not create a session within -session-attempt-timeout %v: %v", h.opts.SessionAttemptTimeout, err)
		if !errors.Is(err, context.DeadlineExceeded) {
			msg = "the driver's new-session call failed: " + err.Error()
		}
		return "", nil, &launcher.StartError{Phase: launcher.PhaseNewSession, Browser: name, Msg: msg, Err: err, Engine: true}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", nil, &launcher.StartError{Phase: launcher.PhaseNewSession, Browser: name, Msg: "reading the driver's new-session answer: " + err.Error(), Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, &driverError{status: resp.StatusCode, body: data}
	}
	var out struct {
		SessionID string `json:"sessionId"`
		Value     struct {
			SessionID    string          `json:"sessionId"`
			Capabilities json.RawMessage `json:"capabilities"`
		} `json:"value"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return "", nil, &launcher.StartError{Phase: launcher.PhaseNewSession, Browser: name, Msg: "the driver's new-session answer is not JSON: " + err.Error(), Err: err}
	}
	sid, caps := out.Value.SessionID, any(out.Value.Capabilities)
	if sid == "" {
		// A JSONWire driver: {"sessionId":…, "status":0, "value":{caps}}.
		var legacy struct {
			Value json.RawMessage `json:"value"`
		}
		_ = json.Unmarshal(data, &legacy)
		sid, caps = out.SessionID, legacy.Value
	}
	if sid == "" {
		return "", nil, &launcher.StartError{Phase: launcher.PhaseNewSession, Browser: name, Msg: "the driver's new-session answer has no sessionId: " + truncate(data, 200)}
	}
	if raw, ok := caps.(json.RawMessage); ok && len(raw) == 0 {
		caps = map[string]any{}
	}
	return sid, caps, nil
}

func (h *Hub) stop(inst launcher.Instance) {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.SessionDeleteTimeout+time.Second)
	defer cancel()
	_ = inst.Stop(ctx)
}

func (h *Hub) writeStartError(w http.ResponseWriter, r *http.Request, id string, b config.Resolved, err error) {
	if r.Context().Err() != nil {
		logtag.Event(h.log, slog.LevelInfo, id, "CLIENT_DISCONNECTED", "during the browser start; it was stopped and its slot released")
		return
	}
	var de *driverError
	if errors.As(err, &de) {
		logtag.Event(h.log, slog.LevelWarn, id, "SESSION_FAILED", b.Name+" "+b.Version, truncate(de.body, 300))
		var body webdriver.ErrorBody
		if json.Unmarshal(de.body, &body) == nil && body.Value.Error != "" {
			webdriver.WriteError(w, de.status, body.Value.Error, fmt.Sprintf("%s %s: the driver refused the new session: %s", b.Name, b.Version, body.Value.Message))
			return
		}
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrSessionNotCreated,
			fmt.Sprintf("%s %s: the driver answered %d to the new-session call: %s", b.Name, b.Version, de.status, truncate(de.body, 300)))
		return
	}
	logtag.Event(h.log, slog.LevelWarn, id, "SESSION_FAILED", err.Error())
	webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrSessionNotCreated, err.Error())
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// sessionResponse shapes the answer: a W3C client gets only value.sessionId (ggr
// rewrites the top-level one when both are present); a JSONWire client gets the
// top-level sessionId and status 0.
func sessionResponse(w3c bool, id string, caps any) any {
	if w3c {
		return map[string]any{"value": map[string]any{"sessionId": id, "capabilities": caps}}
	}
	return map[string]any{"sessionId": id, "status": 0, "value": caps}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// bufferPool reuses ReverseProxy's copy buffers: without it every proxied command
// allocates 32 KiB.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
