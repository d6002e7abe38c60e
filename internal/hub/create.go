package hub

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/pool"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// MaxNewSessionBody is the largest new-session body accepted. Capabilities can
// carry base64 browser extensions of several megabytes; 32 MiB leaves room for
// those and still refuses a runaway upload before it is held in memory.
const MaxNewSessionBody = 32 << 20

// Header names that ask the hub to refuse rather than queue. Either counts when
// present, even empty: ggr sends X-Selenoid-No-Wait with no value.
const (
	NoWaitHeader       = "X-WebSummoner-No-Wait"
	LegacyNoWaitHeader = "X-Selenoid-No-Wait"
)

// StatusDisabled is the status of a refusal under -disable-queue. It is not 429:
// the client did not ask to skip the queue and no budget ran out; there is no
// queue. 500 is what W3C maps "session not created" to, so clients and ggr treat
// it as a failed start on this host and may try another.
const StatusDisabled = http.StatusInternalServerError

// NoWait reports whether the request carries either no-wait header.
func NoWait(h http.Header) bool {
	_, a := h[http.CanonicalHeaderKey(NoWaitHeader)]
	_, b := h[http.CanonicalHeaderKey(LegacyNoWaitHeader)]
	return a || b
}

// creation is one POST /session on its way through the phases; each phase fills
// in what the next needs, and abandon gives back whatever was taken.
type creation struct {
	id string
	w  http.ResponseWriter
	// r is the request until it is detached to wait (then nil: what the
	// phases after admit need of it is kept in owner and base).
	r     *http.Request
	owner string // the authenticated user, if any
	quota string // the user /status files the session under (session.Session.Quota)
	// tenant is whose share of the slots the request takes (-quotas).
	tenant string
	base   string // ws:// or wss:// and the host the client reached the hub by
	ctx    context.Context
	// cancel ends ctx: when the request's own context ends (unhook undoes
	// that link), or when a detached request's client closes its connection.
	cancel context.CancelFunc
	unhook func() bool

	w3c bool // the client speaks W3C (else JSONWire)
	// bytes is the body's length and webdriver.ValueCost for each of its
	// values: what the capabilities it keeps while it waits weigh against
	// -queue-max-bytes.
	bytes int64
	// reading and parsing give back its shares of readBudget and
	// parseBudget (nil: none held), once its candidate is chosen.
	reading, parsing func()
	cands            []webdriver.Candidate // until resolve has chosen one
	asked            string                // the chosen candidate's version, as asked
	opts             webdriver.Options     // the chosen candidate's vendor options
	caps             map[string]any        // the chosen candidate's, merged once
	browser          config.Resolved
	launcher         launcher.Launcher
	slot             *queue.Slot
	inst             launcher.Instance
	// registered: the registry owns inst and slot now.
	registered bool
	session    *session.Session
	driver     webdriver.DriverSession
	took       time.Duration
	// warm says how a warm-pool browser was claimed ("" for none: a cold
	// start); for a near hit, stale is the pooled session start ends.
	warm  pool.Result
	stale webdriver.DriverSession
}

// createSession is POST /session: parse, resolve, check, admit, start, register.
func (h *Hub) createSession(w http.ResponseWriter, r *http.Request) {
	c := &creation{id: strconv.FormatUint(h.reqIDs.Add(1), 10), w: w, r: r, owner: userOf(r), quota: quotaOf(r), base: h.wsBase(r)}
	// The creation's own context, linked to the request's while the handler
	// serves it: a request that waits detached from the handler outlives it,
	// and holds none of the server's context values.
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.unhook = context.AfterFunc(r.Context(), c.cancel)
	logtag.Event(h.log, slog.LevelInfo, c.id, "NEW_REQUEST", r.RemoteAddr)
	defer func() {
		if p := recover(); p != nil { // a panic in any phase still gives back what it held
			h.abandon(c)
			panic(p)
		}
	}()
	if h.runPhases(c, creationPhases(h)) {
		c.unhook()
		c.cancel()
	}
}

type creationPhase struct {
	phase phase
	run   func(*creation) error
}

func creationPhases(h *Hub) []creationPhase {
	return []creationPhase{
		{phaseParse, h.parse},
		{phaseResolve, h.resolve},
		{phaseCheck, h.check},
		{phaseAdmit, h.admit},
		{phaseStart, h.start},
		{phaseRegister, h.register},
	}
}

// runPhases runs phases in order and answers the client: the session, or the
// first phase's error. It returns false, having answered nothing, when the
// request was detached to wait in the queue (the rest runs there).
func (h *Hub) runPhases(c *creation, phases []creationPhase) bool {
	for _, step := range phases {
		err := step.run(c)
		if errors.Is(err, errDetached) {
			return false
		}
		if err == nil && c.ctx.Err() != nil && step.phase != phaseRegister {
			err = errClientGone // stop working for a client that has left
		}
		if err != nil && h.shutDown.Load() && (step.phase == phaseStart || step.phase == phaseRegister) && !errors.Is(err, errClientGoneLogged) {
			// Whatever the start met — its context ended by Drain, its
			// container swept — the hub is what went away.
			err = errShutDown
		}
		if err != nil {
			h.abandon(c)
			h.writeCreateError(c.w, c.id, &createError{phase: step.phase, err: err})
			return true
		}
	}
	details := []any{logtag.SessionID(c.driver.ID), logtag.Browser(c.browser.String()),
		c.inst.Describe(), logtag.Duration(fmt.Sprintf("%.3fs", c.took.Seconds()), c.took)}
	if c.warm != "" {
		details = append(details, "warm pool "+string(c.warm))
	}
	logtag.Event(h.log, slog.LevelInfo, c.id, "SESSION_CREATED", details...)
	writeJSON(c.w, http.StatusOK, webdriver.SessionAnswer(c.w3c, c.driver.ID, h.sideChannelCaps(c.base, c.session, c.driver.Caps)))
	return true
}

// abandon stops what a failed creation started and gives back its slot.
func (h *Hub) abandon(c *creation) {
	h.parsed(c)
	if c.registered {
		return
	}
	if c.inst != nil {
		h.stop(c.id, c.inst)
	}
	c.slot.Release()
}

// parse reads the whole body and parses the capabilities into candidates.
func (h *Hub) parse(c *creation) error {
	if o := c.r.Header.Get("Origin"); o != "" && !fromOwnPage(c.r, o) {
		return &originError{o}
	}
	body, err := h.readBody(c)
	if err != nil {
		return err
	}
	if c.tenant, err = h.tenantOf(c.r); err != nil {
		return err
	}
	values := webdriver.CountValues(body)
	if values <= webdriver.MaxValues { // else ParseNewSession refuses it
		if err := h.take(c, h.parses, "", &c.parsing, webdriver.ParseCost(body, values)); err != nil {
			return err
		}
	}
	ns, err := webdriver.ParseNewSession(body)
	if err != nil {
		return err
	}
	c.w3c, c.bytes = ns.W3C, int64(len(body))+webdriver.ValueCost*int64(values)
	c.cands, err = ns.Candidates()
	return err
}

// readBudget bounds the bytes of the new-session bodies being read at once
// beyond their first freeBody bytes, and parseBudget what their parses
// allocate (webdriver.ParseCost); each holds the largest body's whole cost,
// and thousands of usual ones. A request over one waits its turn, for
// parseWait at most. A body takes its share of readBudget whole and at once,
// when it is known to pass freeBody: its Content-Length, or, chunked,
// MaxNewSessionBody. A request that held part of its share and waited for
// the rest could wait on others doing the same. The parse's share is taken
// once the body is read, and a parse waits for nothing else, so the holders
// of a share always go on.
const (
	readBudget  = 4 * MaxNewSessionBody
	parseBudget = 6 * MaxNewSessionBody
)

// freeBody is what any new-session body may hold without a share of
// readBudget: every usual one fits, so neither waits behind large ones or
// behind a client that declared a large body and sends it slowly; what
// connections hold this way is bounded as their count is (the server sheds
// trickling bodies near the descriptor limit).
const freeBody = 64 << 10

// parseWait bounds a new-session request's wait for its share of
// readBudget or parseBudget: past it, 500 and Retry-After.
const parseWait = time.Minute

// readBody reads a new-session body whole, at most MaxNewSessionBody, within
// its share of readBudget.
func (h *Hub) readBody(c *creation) ([]byte, error) {
	cl := c.r.ContentLength
	if cl > MaxNewSessionBody {
		return nil, &http.MaxBytesError{Limit: MaxNewSessionBody}
	}
	limit := int64(MaxNewSessionBody + 1) // the +1 sees the end without growing again
	if cl >= 0 {
		limit = cl + 1
	}
	if limit > freeBody && cl >= 0 {
		if err := h.take(c, h.reads, c.owner, &c.reading, limit); err != nil {
			return nil, err
		}
	}
	r := http.MaxBytesReader(c.w, c.r.Body, MaxNewSessionBody)
	buf := make([]byte, 0, min(limit, 4<<10))
	for {
		if len(buf) == cap(buf) {
			if cl < 0 && c.reading == nil && int64(cap(buf)) >= freeBody {
				if err := h.take(c, h.reads, c.owner, &c.reading, limit); err != nil {
					return nil, err
				}
			}
			// Grown as the bytes come: a share taken is not memory used
			// until they do.
			buf = append(make([]byte, 0, min(2*int64(cap(buf)), limit)), buf...)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return nil, err
			}
			return nil, &bodyError{err} // malformed chunking, a short body: answered 400
		}
	}
}

// take holds n bytes of b for user, waiting for them if it must, and
// keeps in *give what gives them back. While it waits, the body's
// -body-read-timeout does not run (a body already read has no clock left).
func (h *Hub) take(c *creation, b *budget, user string, give *func(), n int64) error {
	if *give = b.tryTake(user, n); *give != nil {
		return nil
	}
	clock, _ := c.r.Body.(bodyClock)
	if clock != nil {
		clock.PauseTimeout()
	}
	ctx, cancel := context.WithTimeout(c.ctx, parseWait)
	var err error
	*give, err = b.take(ctx, user, n)
	cancel()
	if clock != nil {
		clock.RestartTimeout()
	}
	if err != nil {
		if c.ctx.Err() != nil {
			return errClientGone
		}
		if errors.Is(err, errUserHalf) {
			return errUserParseBusy
		}
		return errParseBusy
	}
	return nil
}

// parsed gives back the creation's shares of readBudget and parseBudget:
// once a candidate is chosen, what it keeps is its capabilities, which the
// queue counts.
func (h *Hub) parsed(c *creation) {
	for _, give := range []func(){c.reading, c.parsing} {
		if give != nil {
			give()
		}
	}
	c.reading, c.parsing = nil, nil
}

// resolve picks the first candidate whose browser is configured, and the
// launcher that runs its entry.
func (h *Hub) resolve(c *creation) error {
	browsers := h.conf.Browsers()
	var firstErr error
	// firstMatch entries in order, as W3C tries them, but an entry asking
	// for a desktop platform other than Linux (Windows, macOS) only after
	// every other: the driver would refuse it where a later entry matches.
	cands := slices.Clone(c.cands)
	slices.SortStableFunc(cands, func(a, b webdriver.Candidate) int {
		return cmp.Compare(b2i(a.OtherPlatform()), b2i(b.OtherPlatform()))
	})
	for _, cand := range cands {
		if cand.Browser == "" {
			if firstErr == nil {
				firstErr = &config.NotFoundError{Msg: "no browserName (or deviceName) in the capabilities; configured: " + browsers.Describe()}
			}
			continue
		}
		b, err := browsers.Find(cand.Browser, cand.Version)
		if err == nil && cand.OtherPlatform() && runtime.GOOS == "linux" {
			// Every driver here would refuse it, after a slot and a start:
			// said now, as Selenium Grid says it.
			p, _ := cand.Caps()["platformName"].(string)
			err = &config.NotFoundError{Msg: fmt.Sprintf("platformName %.100q: this hub's browsers run on Linux; ask for platformName \"linux\" or none", p)}
		}
		if err == nil {
			c.opts, c.caps, c.browser, c.asked = cand.Options, cand.Caps(), b, cand.Version
			firstErr = nil
			break
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if c.browser.Browser == nil {
		return firstErr
	}
	// What a waiting request keeps is its merged capabilities, not the parse.
	c.cands = nil
	h.parsed(c)
	if c.launcher = h.launcherFor(c.browser); c.launcher == nil {
		return &noLauncherError{c.browser}
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// check fails at once, before a slot is taken or a request queues, when the
// client asks for what it may not choose, or the launcher knows the start is
// doomed (engine down, image missing).
func (h *Hub) check(c *creation) error {
	if len(c.opts.Ignored) > 0 {
		logtag.Event(h.log, slog.LevelDebug, c.id, "IGNORED_OPTIONS", strings.Join(c.opts.Ignored, ", "))
	}
	if err := webdriver.CheckDefaults(c.caps, c.w3c, c.browser.Caps); err != nil {
		return err
	}
	if err := launcher.CheckClient(c.browser, c.opts, c.caps); err != nil {
		return err
	}
	if err := h.checkKeptNames(c.opts); err != nil {
		return err
	}
	if oc, ok := c.launcher.(launcher.OptionsChecker); ok {
		if err := oc.CheckOptions(c.browser, c.opts); err != nil {
			return err
		}
	}
	ch, ok := c.launcher.(launcher.Checker)
	if !ok {
		return nil
	}
	err := ch.Check(c.ctx, c.browser)
	// An engine known to be down refuses before anything starts: no start
	// failed, and WebSummonerDockerDown tells it; counted, each refusal
	// would raise WebSummonerStartsFailing too.
	if err != nil && !backendDown(err) {
		h.countFailure(c.browser, err)
	}
	return err
}

// admit waits in the queue for a slot and a start permit. A request that has to
// wait is detached from Go's HTTP server when it can be (detach.go): it then
// waits on no goroutine, and the rest of its creation runs on one of the
// queue's when it is settled.
func (h *Hub) admit(c *creation) error {
	cost := 1
	if c.opts.EnableVideo {
		cost = 2 // the browser's container and its recorder's
	}
	// Go's server notices a closed connection only after the body has been
	// read to its end, and a client that left must not be handed a slot. The
	// body, read, is let go: it holds the connection's 4 KiB read buffer.
	_, _ = io.Copy(io.Discard, c.r.Body)
	c.r.Body = http.NoBody
	if h.claim(c) {
		return nil
	}
	if h.pool != nil && h.queue.Full() && h.queue.MayStart(c.tenant) {
		// A warm browser must not keep a client waiting: its slot is the
		// client's. Eviction marks the slot as being released before the
		// request queues, so even a no-wait request waits for it. A tenant
		// at its maxSessions waits whatever is freed: evicting for it would
		// only cost a browser's start, and others their ready browser.
		h.pool.Evict(c.id)
	}
	slot, out, waiting := h.queue.Enqueue(c.ctx, queue.Request{ID: c.id, NoWait: NoWait(c.r.Header), Cost: cost, Tenant: c.tenant, Bytes: c.bytes, Kind: c.browser.String()})
	if waiting != nil {
		if h.detach(c) {
			waiting.Notify(func(slot *queue.Slot, out queue.Outcome) { h.resume(c, slot, out) })
			return errDetached
		}
		slot, out = waiting.Wait()
	}
	if !out.Admitted {
		return &refusal{out}
	}
	c.slot = slot
	return nil
}

// start launches the browser and creates the driver's session, up to
// -retry-count times, and tells the start gate how it went.
func (h *Hub) start(c *creation) error {
	// /ping's numRequests counts a new session as Selenoid does: once past
	// the queue (refused or gone while waiting, it is not counted).
	h.requests.Add(1)
	h.pending.Add(1)
	defer h.pending.Add(-1)
	// The end of the grace period ends a start under way (Drain): its
	// browser is stopped and its slot given back within the shutdown, and
	// the client hears that the hub is shutting down (runPhases).
	defer context.AfterFunc(h.stopStarts, c.cancel)()
	switch c.warm {
	case pool.Hit:
		return nil
	case pool.Near:
		if done, err := h.startNear(c); done {
			c.slot.Started(startOutcome(c.ctx, err))
			return err
		}
	}
	err := h.startAttempts(c)
	c.slot.Started(startOutcome(c.ctx, err))
	if err != nil && c.ctx.Err() != nil {
		return errClientGone
	}
	return err
}

func (h *Hub) startAttempts(c *creation) error {
	body := h.driverBody(c.caps, c.w3c, c.browser, c.opts)
	var lastErr error
	t0 := time.Now()
	for attempt := 1; attempt <= h.opts.RetryCount; attempt++ {
		if attempt > 1 {
			logtag.Event(h.log, slog.LevelInfo, c.id, "RETRYING", fmt.Sprintf("attempt %d of %d (-retry-count)", attempt, h.opts.RetryCount), lastErr)
		}
		inst, err := c.launcher.Start(c.ctx, launcher.Request{ID: c.id, Browser: c.browser, Options: c.opts})
		if err != nil {
			if c.ctx.Err() != nil {
				return c.ctx.Err()
			}
			var ae *webdriver.ArgumentError
			if errors.As(err, &ae) {
				return err // the client's options, as the launcher reads them: 400, not a failed start
			}
			h.countFailure(c.browser, err)
			if backendDown(err) {
				return err // another attempt now meets the same engine, quota or nodes
			}
			lastErr = err
			continue
		}
		ds, err := h.newDriverSession(c.ctx, inst, forInstance(body, inst), c.browser)
		if err == nil {
			h.sizeWindow(c, inst, ds)
			c.inst, c.driver, c.took = inst, ds, time.Since(t0)
			h.m.startSeconds.WithLabelValues(c.browser.Name, c.browser.Version).Observe(c.took.Seconds())
			if h.pool != nil {
				h.pool.ObserveStart(pool.Key{Browser: c.browser.Name, Version: c.browser.Version}, c.took)
			}
			return nil
		}
		h.stop(c.id, inst)
		if c.ctx.Err() != nil {
			return c.ctx.Err()
		}
		lastErr = err
		var de *webdriver.DriverError
		if errors.As(err, &de) && de.ClientFault() {
			return err // the client's capabilities were refused: retrying won't help
		}
		h.countFailure(c.browser, err)
	}
	return lastErr
}

// register hands the started session to the registry, which from then on owns
// its browser and slot.
func (h *Hub) register(c *creation) error {
	if h.shutDown.Load() {
		return errShutDown
	}
	s := &session.Session{
		ID: c.driver.ID, Browser: c.browser.Name, Version: c.browser.Version, AskedVersion: c.asked, Name: c.opts.Name, Owner: c.owner, Quota: c.quota,
		Caps: c.caps, Screen: c.opts.ScreenResolution, VNC: c.opts.EnableVNC && c.inst.Endpoints().VNC != nil,
		Started: time.Now(), Instance: c.inst, Idle: h.idleFor(c.opts), DriverPath: c.driver.Path,
	}
	if o := c.opts; o.EnableVideo {
		s.Video = o.VideoName
		if s.Video == "" {
			s.Video = c.driver.ID + ".mp4"
		}
	}
	if err := h.keptUnder(c.driver.ID); err != nil {
		return err
	}
	// Before Add: the registry takes the instance's endpoints as they are then.
	c.inst.SessionCreated(c.driver.ID, c.driver.Caps)
	s.BiDiPath = bidiPath(c.driver.Caps)
	s.WebKit = webkit(c)
	if err := h.sessions.Add(s, c.slot); err != nil {
		return err
	}
	c.registered, c.session = true, s
	h.m.created.Inc()
	if c.ctx.Err() != nil {
		// Created after the client left: nobody will ever delete it. The
		// registry's end logs it as CLIENT_DISCONNECTED.
		h.sessions.End(s, session.ReasonClientGone)
		return errClientGoneLogged
	}
	return nil
}

// errClientGoneLogged: the client left after its session was created; the
// session's end has logged it, so the answer is nothing and no second line.
var errClientGoneLogged = errors.New("the client left after its session was created")

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
	var de *webdriver.DriverError
	if errors.As(err, &de) && !de.ClientFault() {
		return queue.StartFailed
	}
	return queue.StartIgnored
}

// backendDown reports a start refused because the engine or API server does
// not answer or has no room now (launcher.StartError.Down).
func backendDown(err error) bool {
	var se *launcher.StartError
	return errors.As(err, &se) && se.Down
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
func (h *Hub) newDriverSession(ctx context.Context, inst launcher.Instance, body []byte, b config.Resolved) (webdriver.DriverSession, error) {
	fail := func(msg string, err error, engine bool) (webdriver.DriverSession, error) {
		return webdriver.DriverSession{}, &launcher.StartError{Phase: launcher.PhaseNewSession, Browser: b.String(), Msg: msg, Err: err, Engine: engine}
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.SessionAttemptTimeout)
	defer cancel()
	base := inst.Endpoints().Driver
	status, data, err := h.driverCall(ctx, http.MethodPost, base.JoinPath("session"), body, webdriver.MaxNewSessionAnswer)
	var wdHub string
	if err == nil && status == http.StatusNotFound && b.Path == "" {
		// An entry without "path" may be an image whose driver (a Selenium
		// server) listens under /wd/hub: Selenoid tries there once, and the
		// same browsers.json must work here.
		wdHub = "/wd/hub"
		alt := *base
		alt.Path = wdHub
		status, data, err = h.driverCall(ctx, http.MethodPost, alt.JoinPath("session"), body, webdriver.MaxNewSessionAnswer)
	}
	switch {
	case errors.Is(err, errTooLarge):
		return fail(fmt.Sprintf("the driver's new-session answer is larger than %d MiB; a driver's capabilities are kilobytes — check the image", webdriver.MaxNewSessionAnswer>>20), nil, false)
	case errors.Is(err, errAnswerBroken):
		return fail("reading the driver's new-session answer: "+err.Error(), err, false)
	case errors.Is(err, context.DeadlineExceeded):
		return fail(fmt.Sprintf("the driver did not create a session within -session-attempt-timeout %v: %v", h.opts.SessionAttemptTimeout, err), err, true)
	case err != nil:
		return fail("the driver's new-session call failed: "+err.Error(), err, true)
	}
	if status != http.StatusOK {
		return webdriver.DriverSession{}, &webdriver.DriverError{Browser: b.String(), Status: status, Body: data}
	}
	ds, err := webdriver.ParseDriverSession(data)
	if err != nil {
		return fail("the driver's new-session answer: "+err.Error(), err, false)
	}
	ds.Path = wdHub
	return ds, nil
}

// driverURL is the URL of elem under the driver of a session ds that inst
// serves, on the path the driver created the session on.
func driverURL(inst launcher.Instance, ds webdriver.DriverSession, elem ...string) *url.URL {
	u := *inst.Endpoints().Driver
	if ds.Path != "" {
		u.Path = ds.Path
	}
	return u.JoinPath(elem...)
}

// Errors of driverCall's answer.
var (
	errAnswerBroken = errors.New("the driver's answer broke off")
	errTooLarge     = errors.New("the answer exceeds its limit")
)

// driverCall makes a call of the hub's own to a driver (new session, DELETE)
// over the Transport its commands use, so a new session's connection is the
// one its first command takes. It answers the status and the body, read
// whole; a body over limit is errTooLarge, one that breaks off
// errAnswerBroken. Redirects are never followed.
func (h *Hub) driverCall(ctx context.Context, method string, u *url.URL, body []byte, limit int) (int, []byte, error) {
	hdr := http.Header{}
	if body != nil {
		hdr.Set("Content-Type", "application/json; charset=utf-8")
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header = hdr
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", errAnswerBroken, err)
	}
	if len(data) > limit {
		return 0, nil, errTooLarge
	}
	return resp.StatusCode, data, nil
}

// stop stops an instance the hub still owns, logging a failed stop. The
// launcher bounds the stop by its own -session-delete-timeout.
func (h *Hub) stop(id string, inst launcher.Instance) {
	if err := inst.Stop(context.Background()); err != nil {
		logtag.Event(h.log, slog.LevelWarn, id, "STOP_FAILED", inst.Describe(), err)
	}
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

// quotaOf is the user /status files r's session under: the authenticated
// one, or, without authentication, the one r's basic auth names, unchecked,
// as Selenoid files sessions (behind ggr, the user of ggr's host entry, or
// the client's own, which ggr forwards).
func quotaOf(r *http.Request) string {
	if u := userOf(r); u != "" {
		return u
	}
	u, _, _ := r.BasicAuth()
	if len(u) > maxQuotaName || !utf8.ValidString(u) {
		return "" // unchecked: a name of a header's length would be every /status's
	}
	return u
}

// maxQuotaName bounds an unchecked basic-auth user name that /status shows.
const maxQuotaName = 256
