// Package hub serves the WebDriver endpoints: it creates sessions through the
// queue and a launcher, proxies every command to the session's driver, ends
// sessions, and reports status.
//
// Files: create.go is POST /session as its phases; errors.go maps every
// creation error to its answer; proxy.go forwards commands and DELETE;
// status.go is /status, /ping and the probes.
package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/capacity"
	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/hangup"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/pool"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// Defaults for zero Options fields.
const (
	DefaultSessionAttemptTimeout = 30 * time.Second
	DefaultSessionDeleteTimeout  = 30 * time.Second
	DefaultMaxUploadSize         = 64 << 20
	DefaultExitGrace             = time.Second
)

// Options configure the hub. The zero value works: every field's zero value is
// documented with it.
type Options struct {
	// IdleTimeout is -timeout: a session with no command for this long ends.
	// Zero: sessions never end for being idle.
	IdleTimeout time.Duration
	// MaxTimeout is -max-timeout: the most a client's sessionTimeout may ask for.
	// Zero: no cap.
	MaxTimeout time.Duration
	// SessionAttemptTimeout is -session-attempt-timeout: the driver's new-session
	// call, per attempt. Zero: DefaultSessionAttemptTimeout.
	SessionAttemptTimeout time.Duration
	// SessionDeleteTimeout is -session-delete-timeout: forwarding DELETE to the
	// driver. Zero: DefaultSessionDeleteTimeout.
	SessionDeleteTimeout time.Duration
	// RetryCount is -retry-count: attempts to start a browser for one request.
	// Zero: 1.
	RetryCount int
	// LogDir is -log-output-dir, served at /logs/. Empty: /logs/ lists nothing.
	LogDir string
	// VideoDir is -video-output-dir, served at /video/. Empty: no videos.
	VideoDir string
	// MaxUploadSize is -max-upload-size: the largest file upload (Selenium's
	// /se/file or /file body) passed to a driver. Zero: DefaultMaxUploadSize.
	MaxUploadSize int64
	// Version is reported by /ping and /status. Empty: "dev".
	Version string
	// Metrics serves /metrics. Nil: /metrics answers 404.
	Metrics http.Handler
	// Gate reports the start gate's state for /status. Nil: /status shows none.
	Gate GateReporter
	// Auth says who sent a request and who is an operator. Nil: no
	// authentication; every client may drive every session.
	Auth Authenticator
	// Transport carries every request to a driver and its side services: the
	// new-session call, commands, DELETE, uploads and WebSockets. Nil:
	// NewTransport(Dial). Tests give an in-memory one to run in fake time.
	Transport http.RoundTripper
	// Dial opens every connection to a driver and its side services when
	// Transport is nil. Nil: a net.Dialer. A hub with sandboxed local drivers
	// dials through a netns.Dialer, which reaches each sandbox's own loopback.
	Dial DialFunc
	// MaxSideChannelsPerSession is -max-side-channels-per-session: the most
	// WebSockets and live-log streams (/logs/{id}, /vnc/{id}, /devtools/{id},
	// /session/{id}/se/bidi) open at once to one session; one more is 429.
	// Zero: DefaultMaxSideChannelsPerSession.
	MaxSideChannelsPerSession int
	// MaxSideChannelsPerClient is -max-side-channels-per-client: the same, for
	// one client (its user under -htpasswd, else its IP address) across all
	// sessions. Zero: DefaultMaxSideChannelsPerClient.
	MaxSideChannelsPerClient int
	// TenantHeader is -tenant-header: without authentication, a request's
	// tenant (its share of the slots, -quotas) is this header's value, set by
	// a trusted front. Empty: one tenant for all. Under authentication the
	// tenant is always the user.
	TenantHeader string
	// WarmPool is -warm-pool and -warm-pool-max-age: browsers started before
	// they are asked for, each handed to one client (internal/pool). The zero
	// value is off.
	WarmPool pool.Options
	// AllowedHosts is -allowed-hosts: when not nil, a request whose Host
	// header is a name other than localhost, *.localhost or one of these is
	// refused (403) before anything else (hostAllowed). nil takes every Host.
	AllowedHosts []string
	// ExitGrace is how long a command whose driver dropped its connection
	// waits for the browser's exit to be seen (a container's die event comes
	// after the connection breaks), so that it is answered invalid session id
	// as the next command would be, not unknown error. Zero: DefaultExitGrace.
	ExitGrace time.Duration
}

// DialFunc opens a connection, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Authenticator says who sent a request (internal/auth implements it).
type Authenticator interface {
	// Enabled reports whether clients must authenticate.
	Enabled() bool
	// User is the request's authenticated user; false for missing or wrong
	// credentials.
	User(r *http.Request) (string, bool)
	// Admin reports whether user sees and may drive every session.
	Admin(user string) bool
}

// GateReporter is the start gate as /status sees it.
type GateReporter interface {
	Stats() capacity.Stats
}

// Validate says which flag holds a value the hub cannot work with.
func (o Options) Validate() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"timeout", o.IdleTimeout}, {"max-timeout", o.MaxTimeout},
		{"session-attempt-timeout", o.SessionAttemptTimeout}, {"session-delete-timeout", o.SessionDeleteTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("-%s must be 0 or a positive duration such as 30s (got %v)", d.flag, d.v)
		}
	}
	if o.IdleTimeout > 0 && o.IdleTimeout < time.Second {
		return fmt.Errorf("-timeout must be 0 (never) or at least 1s: a shorter idle timeout ends sessions between two commands (got %v)", o.IdleTimeout)
	}
	if o.RetryCount < 0 {
		return fmt.Errorf("-retry-count must be at least 1 (got %d)", o.RetryCount)
	}
	if o.MaxSideChannelsPerSession < 0 || o.MaxSideChannelsPerClient < 0 {
		return fmt.Errorf("-max-side-channels-per-session and -max-side-channels-per-client must be 0 (the default) or a positive count (got %d and %d)", o.MaxSideChannelsPerSession, o.MaxSideChannelsPerClient)
	}
	if o.MaxUploadSize < 0 {
		return fmt.Errorf("-max-upload-size must be a positive number of MiB (got %d bytes)", o.MaxUploadSize)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.SessionAttemptTimeout == 0 {
		o.SessionAttemptTimeout = DefaultSessionAttemptTimeout
	}
	if o.SessionDeleteTimeout == 0 {
		o.SessionDeleteTimeout = DefaultSessionDeleteTimeout
	}
	if o.RetryCount == 0 {
		o.RetryCount = 1
	}
	if o.ExitGrace <= 0 {
		o.ExitGrace = DefaultExitGrace
	}
	if o.MaxUploadSize == 0 {
		o.MaxUploadSize = DefaultMaxUploadSize
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.MaxSideChannelsPerSession == 0 {
		o.MaxSideChannelsPerSession = DefaultMaxSideChannelsPerSession
	}
	if o.MaxSideChannelsPerClient == 0 {
		o.MaxSideChannelsPerClient = DefaultMaxSideChannelsPerClient
	}
	if o.Transport == nil {
		o.Transport = NewTransport(o.Dial)
	}
	return o
}

// Launchers are the ways to start a browser; an entry's "image" picks one.
type Launchers struct {
	// Process runs command-line "image" entries.
	Process launcher.Launcher
	// Docker runs image-name entries: in Docker containers, or in Kubernetes
	// pods under -kubernetes; nil while the hub runs with -disable-docker.
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
	// refusedHosts paces the log of refused Host names.
	refusedHosts refusedHosts
	proxy        *httputil.ReverseProxy
	client       *http.Client
	router       *mux.Router
	m            *metrics
	hangups      hangup.Watcher // clients of detached waiting requests
	side         sideChannels   // open side channels, against their caps
	pool         *pool.Pool     // nil while -warm-pool is off
	uploads      *budget        // bytes of file uploads held at once (uploadBudget)
	reads        *budget        // bytes of new-session bodies being read (readBudget)
	parses       *budget        // what their parses allocate (parseBudget), for no user in particular

	started  time.Time
	requests atomic.Uint64
	reqIDs   atomic.Uint64
	pending  atomic.Int64
	draining atomic.Bool // Drain has begun: /readyz and /status say so
	shutDown atomic.Bool // the grace period is over: no session may be registered
	// stopStarts ends with the grace period: starts under way end with it.
	stopStarts context.Context
	endStarts  context.CancelFunc
}

// New builds a hub from its parts.
func New(opts Options, q *queue.Queue, conf *config.Store, ls Launchers, sessions *session.Registry, logger *slog.Logger, reg prometheus.Registerer) (*Hub, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Hub{opts: opts, log: logger, queue: q, conf: conf, launchers: ls, sessions: sessions, started: time.Now(),
		uploads: newBudget(uploadBudget * opts.MaxUploadSize), reads: newBudget(readBudget), parses: newBudget(parseBudget)}
	h.stopStarts, h.endStarts = context.WithCancel(context.Background())
	// The new-session call must not follow a driver's redirects and re-post the
	// capabilities somewhere else.
	h.client = &http.Client{Transport: opts.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	h.proxy = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		Transport:      opts.Transport,
		ErrorHandler:   h.proxyError,
		ModifyResponse: h.modifyResponse,
		// FlushInterval stays 0: an answer of known length leaves in one
		// write, headers and body together, when the handler returns. A
		// negative interval would flush the headers apart from the body (a write
		// and a client wake-up more per command, and a timer's goroutine);
		// an answer of unknown length is flushed as it comes either way.
		BufferPool: &bufferPool{},
		// An answer that breaks off reaches the client cut off, which is what
		// it needs to know; the line is for debugging a driver.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	var err error
	if h.m, err = newMetrics(h, reg); err != nil {
		return nil, err
	}
	h.router = h.routes()
	if opts.WarmPool.On() {
		if h.pool, err = pool.New(opts.WarmPool, h, logger, reg); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Start begins the hub's background work: the warm pool's fills. Call it
// once the process is ready to run browsers — what an earlier run left
// swept, signals set up — and not in a build that will not serve.
func (h *Hub) Start() {
	if h.pool != nil {
		h.pool.Start()
	}
}

// SetQuotas replaces the queue's quotas (a reload). Waiters the new quotas
// let run take free slots at once; those that find every slot held, some by
// ready browsers of the warm pool, are given those slots, as a request
// arriving is.
func (h *Hub) SetQuotas(qs *queue.Quotas) {
	h.queue.SetQuotas(qs)
	if h.pool == nil {
		return
	}
	for n := h.queue.Starved(); n > 0; n-- {
		if !h.pool.Evict("") {
			return
		}
	}
}

// ServeHTTP serves every endpoint.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.opts.AllowedHosts != nil && !hostAllowed(r.Host, h.opts.AllowedHosts) {
		h.refuseHost(w, r)
		return
	}
	if dotSegment(r.URL.EscapedPath()) {
		// Never normalised and passed on: /session/A/%2e%2e/%2e%2e/status must not
		// reach the driver's /status, nor another session's path.
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrUnknownCommand,
			fmt.Sprintf("%s %s has a \".\" or \"..\" path segment; WebDriver paths have none", r.Method, r.URL.EscapedPath()))
		return
	}
	if clean, ok := selenoidPath(r.URL.EscapedPath()); !ok {
		r = withPath(r, clean)
	}
	if !monitoring[r.URL.Path] && !isNewSession(r) { // a new session counts once admitted (start)
		h.requests.Add(1)
	}
	if h.opts.Auth != nil && h.opts.Auth.Enabled() && !openPaths[r.URL.Path] {
		user, ok := h.opts.Auth.User(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="WebSummoner", charset="UTF-8"`)
			webdriver.WriteError(w, http.StatusUnauthorized, webdriver.ErrUnknownError,
				"authentication required: send HTTP basic auth of a user in the hub's -htpasswd (in a RemoteWebDriver URL: http://user:password@host:4444/wd/hub)")
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
	}
	// Commands, nearly every request a hub serves, skip the router: the
	// session is found by the id in the path.
	if id, rest, ok := commandPath(r.URL.EscapedPath()); ok && !routed(rest) {
		h.command(w, r, id)
		return
	}
	h.router.ServeHTTP(w, r)
}

// monitoring are the paths that /ping's numRequests does not count, as
// Selenoid counts none of them: what dashboards and probes poll would
// swamp what clients ask.
var monitoring = map[string]bool{"/ping": true, "/status": true, "/wd/hub/status": true, "/healthz": true, "/readyz": true, "/metrics": true, "/ui/state": true}

// isNewSession reports a new-session request.
func isNewSession(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/session" || r.URL.Path == "/wd/hub/session")
}

// openPaths are served without authentication: probes and Prometheus's scrape.
var openPaths = map[string]bool{"/metrics": true, "/ping": true, "/healthz": true, "/readyz": true}

type userKey struct{}

// userOf is the request's authenticated user ("" with authentication off).
func userOf(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

// sees reports whether the request's user may see and drive s.
func (h *Hub) sees(r *http.Request, s *session.Session) bool {
	return h.mayKnow(r, s.Owner)
}

// mayKnow reports whether r's user may know of owner's sessions: without
// -htpasswd anyone, else the owner and the admins.
func (h *Hub) mayKnow(r *http.Request, owner string) bool {
	if h.opts.Auth == nil || !h.opts.Auth.Enabled() {
		return true
	}
	u := userOf(r)
	return owner == u || h.opts.Auth.Admin(u)
}

// selenoidPath is an escaped path as Selenoid takes it: empty segments
// gone, and a command's trailing slash too; ok when it was already so.
// Python's Selenium sends /wd/hub//session for a grid URL that ends in a
// slash (Selenoid redirects it, and the client follows); and a command with a
// trailing slash reaches no command of the driver's (Selenoid joins the path).
func selenoidPath(path string) (clean string, ok bool) {
	clean = path
	for strings.Contains(clean, "//") {
		clean = strings.ReplaceAll(clean, "//", "/")
	}
	if _, rest, cmd := commandPath(clean); cmd && strings.HasSuffix(rest, "/") && !strings.HasPrefix(rest, "aerokube/") {
		// A side channel's listing (aerokube/download/) keeps its slash.
		clean = strings.TrimSuffix(clean, "/")
	}
	return clean, clean == path
}

// withPath is r with its escaped path replaced: a copy, as a handler may not
// change the request it was given.
func withPath(r *http.Request, escaped string) *http.Request {
	r2 := *r
	u := *r.URL
	u.RawPath = escaped
	if p, err := url.PathUnescape(escaped); err == nil {
		u.Path = p
	}
	r2.URL = &u
	return &r2
}

// dotSegment reports whether an escaped path has a segment that is "." or ".."
// once unescaped.
func dotSegment(path string) bool {
	if !strings.Contains(path, ".") && !strings.Contains(path, "%2") {
		return false
	}
	for seg := range strings.SplitSeq(path, "/") {
		if len(seg) > 9 {
			continue
		}
		if u, err := url.PathUnescape(seg); err == nil && (u == "." || u == "..") || err != nil && (seg == "." || seg == "..") {
			return true
		}
	}
	return false
}

// routes is every endpoint. A new side channel of a session (DevTools, VNC,
// downloads…) is a handler here that looks the session up with begin and reads
// the address it needs from the session's launcher.Endpoints.
func (h *Hub) routes() *mux.Router {
	r := mux.NewRouter()
	r.UseEncodedPath()
	// No cleaning: mux would answer "//" with an empty 301, even to a POST.
	r.SkipClean(true)
	for _, prefix := range []string{"/wd/hub", ""} {
		sr := r.PathPrefix(prefix).Subrouter()
		if prefix == "" {
			sr = r
		}
		sr.HandleFunc("/session", h.createSession).Methods(http.MethodPost)
		sr.HandleFunc("/session", methodNotAllowed)
		sr.HandleFunc("/session/{id}", h.deleteSession).Methods(http.MethodDelete)
		// The driver ends its session for this spelling too: so must the hub.
		sr.HandleFunc("/session/{id}/", h.deleteSession).Methods(http.MethodDelete)
		sr.HandleFunc("/session/{id}/se/bidi", h.bidi)
		sr.HandleFunc("/session/{id}/se/files", h.gridFiles)
		// Selenoid's alias: aerokube/X/… is its own /X/{id}/…, path.Clean'd,
		// so either spelling of the slash serves. routed (proxy.go) must send
		// these paths here rather than to the driver.
		sr.HandleFunc("/session/{id}/aerokube/download", h.downloadsNoSlash)
		sr.HandleFunc("/session/{id}/aerokube/download/", h.downloads)
		sr.HandleFunc("/session/{id}/aerokube/download/{file}", h.downloads)
		sr.HandleFunc("/session/{id}/aerokube/clipboard", h.clipboard)
		sr.HandleFunc("/session/{id}/aerokube/clipboard/", h.clipboard)
		sr.HandleFunc("/session/{id}/aerokube/devtools", h.devtools)
		sr.HandleFunc("/session/{id}/aerokube/devtools/{rest:.*}", h.devtools)
		sr.HandleFunc("/session/{id}/aerokube/vnc", h.vnc)
		sr.HandleFunc("/session/{id}/aerokube/vnc/", h.vnc)
		sr.HandleFunc("/session/{id}/aerokube/logs", h.sessionLogs)
		sr.HandleFunc("/session/{id}/aerokube/logs/", h.sessionLogs)
		sr.HandleFunc("/session/{id}", h.proxyCommand)
		sr.PathPrefix("/session/{id}/").HandlerFunc(h.proxyCommand) // "/session/{id}/" itself
	}
	r.HandleFunc("/logs", toListing).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/logs/", h.logs)
	r.HandleFunc("/logs/{name}", h.logs)
	// Selenoid lists at /download/{id} too, and takes /clipboard/{id}/: its
	// handlers pass whatever follows the id to the file server and xseld.
	r.HandleFunc("/download/{id}", h.downloadsNoSlash)
	r.HandleFunc("/download/{id}/", h.downloads)
	r.HandleFunc("/download/{id}/{file}", h.downloads)
	r.HandleFunc("/clipboard/{id}", h.clipboard)
	r.HandleFunc("/clipboard/{id}/", h.clipboard)
	r.HandleFunc("/vnc/{id}", h.vnc)
	r.Handle("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently)).Methods(http.MethodGet)
	r.HandleFunc("/ui/state", h.uiState).Methods(http.MethodGet, http.MethodHead)
	r.PathPrefix("/ui/").Handler(h.uiStatic()).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/video", toListing).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/video/", h.video)
	r.HandleFunc("/video/{name}", h.video)
	r.HandleFunc("/devtools/{id}", h.devtools)
	r.HandleFunc("/devtools/{id}/{rest:.*}", h.devtools)
	// Probes and the welcome page take HEAD (curl -I, wget --spider; Go's
	// server drops the body) and OPTIONS (HAProxy's default "option httpchk"
	// is OPTIONS /); other methods stay 405. /wd/hub and /wd/hub/ are
	// Selenoid's welcome too (it redirects the first to the second).
	for _, p := range []struct {
		path string
		fn   http.HandlerFunc
	}{
		{"/wd/hub/status", h.w3cStatus}, {"/status", h.selenoidStatus}, {"/ping", h.ping},
		{"/healthz", h.healthz}, {"/readyz", h.readyz},
		{"/", h.welcome}, {"/welcome", h.welcome}, {"/wd/hub", h.welcome}, {"/wd/hub/", h.welcome},
	} {
		r.HandleFunc(p.path, p.fn).Methods(http.MethodGet, http.MethodHead)
		r.HandleFunc(p.path, probeOptions).Methods(http.MethodOptions)
	}
	r.HandleFunc("/error", h.errorPage)
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

// probeOptions answers OPTIONS on a probe: 200, as a health check expects.
func probeOptions(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Allow", "GET, HEAD, OPTIONS")
	w.WriteHeader(http.StatusOK)
}

// toListing sends /logs and /video, as bookmarks and scripts for Selenoid
// spell them, to their listings, as Selenoid does.
func toListing(w http.ResponseWriter, r *http.Request) {
	to := r.URL.EscapedPath() + "/"
	if r.URL.RawQuery != "" {
		to += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, to, http.StatusTemporaryRedirect)
}

// downloadsNoSlash is the download listing asked for without its trailing
// slash, which Selenoid lists too. The HTML page's links are relative to the
// slash spelling, so a browser is sent there first; a script (?json, or any
// other Accept) gets the listing, as from Selenoid. The Location is an
// absolute path: a relative one would begin with the id, which may hold ':'.
func (h *Hub) downloadsNoSlash(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && !r.URL.Query().Has("json") && strings.Contains(r.Header.Get("Accept"), "text/html") {
		to := r.URL.EscapedPath() + "/"
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, to, http.StatusMovedPermanently)
		return
	}
	h.downloads(w, r)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	webdriver.WriteError(w, http.StatusMethodNotAllowed, webdriver.ErrUnknownMethod,
		fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
}

// Drain stops admitting new sessions and waits, until ctx ends, for the live and
// starting ones to finish; then it ends the rest. Requests already queued, and
// every later one, are refused by the closed queue (500 + Retry-After).
func (h *Hub) Drain(ctx context.Context) {
	h.draining.Store(true)
	if h.pool != nil {
		// Ready browsers serve no one now: their slots must not keep the
		// queue from draining.
		h.pool.Close()
	}
	h.queue.Close()
	logtag.Event(h.log, slog.LevelInfo, "", "DRAINING", fmt.Sprintf("%d sessions", h.sessions.Len()))
	select {
	case <-h.queue.Drained():
		return
	case <-ctx.Done():
	}
	h.shutDown.Store(true)
	h.endStarts()
	h.sessions.EndAll(session.ReasonShutdown)
	// A start still under way ends in register, refused: wait for its slot, for
	// as long as a stop may take.
	t := time.NewTimer(h.opts.SessionDeleteTimeout)
	defer t.Stop()
	select {
	case <-h.queue.Drained():
	case <-t.C:
		logtag.Event(h.log, slog.LevelWarn, "", "DRAIN_INCOMPLETE", fmt.Sprintf("%d slots still held after -session-delete-timeout %v", h.queue.Stats().InUse, h.opts.SessionDeleteTimeout))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnknownError, "encoding the answer: "+err.Error())
		return
	}
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

// tenantOf is whose share of the slots a request takes: its user under
// authentication, else the -tenant-header value (as a trusted front sets
// it), else "" for everyone. A header value that is no tenant's name — over
// queue.MaxTenantName bytes, or not UTF-8 — is refused, not cut: two fronts'
// long names cut to one would share a quota.
func (h *Hub) tenantOf(r *http.Request) (string, error) {
	if h.opts.Auth != nil && h.opts.Auth.Enabled() {
		return userOf(r), nil
	}
	if h.opts.TenantHeader == "" {
		return "", nil
	}
	t := strings.TrimSpace(r.Header.Get(h.opts.TenantHeader))
	switch {
	case len(t) > queue.MaxTenantName:
		return "", &webdriver.ArgumentError{Msg: fmt.Sprintf("the %s header (-tenant-header) names a tenant in at most %d bytes; it has %d",
			h.opts.TenantHeader, queue.MaxTenantName, len(t))}
	case !utf8.ValidString(t):
		return "", &webdriver.ArgumentError{Msg: fmt.Sprintf("the %s header (-tenant-header) names a tenant in UTF-8; %q is not", h.opts.TenantHeader, t)}
	}
	return t, nil
}
