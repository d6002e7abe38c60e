// Package session keeps the live sessions: who holds which browser and slot, the
// idle and lifetime timers, and the one path by which a session ends, exactly once
// whatever ends it.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/metrics"
)

// Reasons a session ends; the values of the ended_total metric's reason label.
const (
	ReasonDeleted    = "deleted"     // the client sent DELETE /session/{id}
	ReasonIdle       = "timeout"     // no command for the idle timeout
	ReasonLifetime   = "lifetime"    // -max-session-lifetime reached
	ReasonCrashed    = "crashed"     // the browser or driver exited by itself
	ReasonClientGone = "client_gone" // created after its client had left
	ReasonShutdown   = "shutdown"    // the hub is stopping
	// ReasonLastWindow: the client closed the browser's last window, which
	// ends the driver's session (W3C Close Window), as Grid ends it.
	ReasonLastWindow = "last_window"
	// ReasonDriverEnded: the driver answered a command that it has no such
	// session (a page crash or hang ends chromedriver's and
	// WebKitWebDriver's), while its process lives on.
	ReasonDriverEnded = "driver_ended"
)

var reasons = []string{ReasonDeleted, ReasonIdle, ReasonLifetime, ReasonCrashed, ReasonClientGone, ReasonShutdown, ReasonLastWindow, ReasonDriverEnded}

var eventOf = map[string]string{
	ReasonDeleted:     "SESSION_DELETED",
	ReasonIdle:        "SESSION_TIMED_OUT",
	ReasonLifetime:    "SESSION_LIFETIME_EXCEEDED",
	ReasonCrashed:     "BROWSER_EXITED",
	ReasonClientGone:  "CLIENT_DISCONNECTED",
	ReasonShutdown:    "SESSION_SHUTDOWN",
	ReasonLastWindow:  "SESSION_LAST_WINDOW_CLOSED",
	ReasonDriverEnded: "SESSION_ENDED_BY_DRIVER",
}

// Releaser gives back what a session holds besides its browser: its queue slot.
type Releaser interface{ Release() }

// releasingSlot is a Releaser told when its session has ended and only the
// teardown of its browser stands between it and Release (queue.Slot).
type releasingSlot interface{ Releasing() }

// Session is one live session.
type Session struct {
	ID      string
	Browser string
	Version string
	// AskedVersion is the version the client asked for ("" for none, which
	// resolved to browsers.json's default): /status files the session under
	// it, as Selenoid does.
	AskedVersion string
	Name         string
	// Owner is the authenticated user who created it ("" without authentication).
	Owner string
	// Quota is the user /status files it under, as Selenoid does: Owner,
	// or without authentication the user its creation's basic auth named
	// (ggr in front names its own), unchecked; "" for none.
	Quota string
	Caps  map[string]any
	// Screen is the screen resolution asked for ("" = the image's default).
	Screen string
	// VNC says the session's screen can be watched (enableVNC, and the image
	// serves VNC).
	VNC bool
	// Video is the name its recording will have (enableVideo); "" without.
	Video string
	// BiDiPath is the path of the driver's WebDriver BiDi socket on its own port,
	// when the client asked for webSocketUrl; "" otherwise.
	BiDiPath string
	// WebKit says the session's browser is WebKit's MiniBrowser: its driver
	// has no /file (the hub stores uploads itself) and it has no DevTools.
	WebKit   bool
	Started  time.Time
	Instance launcher.Instance
	// Idle is this session's idle timeout (-timeout, or its sessionTimeout).
	Idle time.Duration
	// DriverPath, when not "", replaces the path of the instance's driver
	// URL: the driver made the session elsewhere than its entry says
	// (webdriver.DriverSession.Path).
	DriverPath string

	slot      Releaser
	endpoints launcher.Endpoints
	inflight  int
	lastDone  time.Time // when the last command finished (zero: none has)
	added     time.Time // when Add registered it: the idle timeout's start until a command ends
	idle      *time.Timer
	life      *time.Timer
	ended     chan struct{}
	once      sync.Once
}

// URL is the driver's base URL.
func (s *Session) URL() *url.URL { return s.endpoints.Driver }

// Ended is closed once the session has ended, whatever ended it.
func (s *Session) Ended() <-chan struct{} { return s.ended }

// Endpoints says where the session's driver and side services are.
func (s *Session) Endpoints() launcher.Endpoints { return s.endpoints }

// Options configure a Registry. The zero value works.
type Options struct {
	// MaxLifetime ends any session this long after it started, busy or not; 0 = never.
	MaxLifetime time.Duration
	// Remember is how many ended sessions are remembered, so that a late command
	// learns why its session ended; 0 means 1000.
	Remember int
}

// Registry holds the live sessions.
type Registry struct {
	opts  Options
	log   *slog.Logger
	ended *prometheus.CounterVec

	mu       sync.Mutex
	sessions map[string]*Session
	recent   map[string]endedRecord // id → why it ended, and whose it was
	order    []string               // ids in recent, oldest first
	wg       sync.WaitGroup         // Ends in progress
}

// New returns an empty registry with its metrics registered on reg (if not nil).
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Registry, error) {
	if opts.Remember <= 0 {
		opts.Remember = 1000
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{opts: opts, log: logger, sessions: map[string]*Session{}, recent: map[string]endedRecord{}}
	r.ended = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "websummoner_sessions_ended_total",
		Help: "Sessions ended, by reason: deleted, timeout (idle), lifetime, crashed, client_gone, shutdown, last_window, driver_ended.",
	}, []string{"reason"})
	for _, rs := range reasons {
		r.ended.WithLabelValues(rs)
	}
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "websummoner_sessions_active",
		Help: "Sessions running now.",
	}, func() float64 { return float64(r.Len()) })
	if err := metrics.Register(reg, r.ended, active); err != nil {
		return nil, err
	}
	return r, nil
}

// ErrDuplicate is returned by Add for a session id live or remembered: a
// driver is not trusted to answer a fresh one, and an id used again would be
// taken for the first session's (whose it was, why it ended, its kept files).
var ErrDuplicate = errors.New("the driver answered a session id this hub has already used")

// Add registers a started session; from now on the registry owns its instance and
// slot and will release both exactly once. On error the caller still owns them.
func (r *Registry) Add(s *Session, slot Releaser) error {
	s.slot = slot
	s.endpoints = s.Instance.Endpoints()
	if s.DriverPath != "" {
		u := *s.endpoints.Driver
		u.Path = s.DriverPath
		s.endpoints.Driver = &u
	}
	s.ended = make(chan struct{})
	r.mu.Lock()
	_, live := r.sessions[s.ID]
	_, past := r.recent[s.ID]
	if live || past {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrDuplicate, s.ID)
	}
	r.sessions[s.ID] = s
	if s.Idle > 0 {
		s.added = time.Now()
		s.idle = time.AfterFunc(s.Idle, func() { r.idleCheck(s) })
	}
	if r.opts.MaxLifetime > 0 {
		s.life = time.AfterFunc(r.opts.MaxLifetime, func() { r.End(s, ReasonLifetime) })
	}
	r.mu.Unlock()
	go func() {
		select {
		case <-s.Instance.Exited():
			r.End(s, ReasonCrashed)
		case <-s.ended:
		}
	}()
	return nil
}

// Get looks a live session up without holding its idle timer.
func (r *Registry) Get(id string) (*Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sessions[id]
	return s, ok
}

// Begin looks a session up for a command and holds its idle timeout until
// Done.
func (r *Registry) Begin(id string) (*Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sessions[id]
	if !ok {
		return nil, false
	}
	s.inflight++
	return s, true
}

// Done marks a command finished; the idle timeout starts again after the last one.
func (r *Registry) Done(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.inflight--
	if s.inflight == 0 {
		s.lastDone = time.Now()
	}
}

// Touch counts traffic on a session's side channel (a DevTools or BiDi
// message from its client) as activity: the idle timeout starts again from
// now, as after a command; a command running keeps holding it.
func (r *Registry) Touch(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.inflight > 0 || r.sessions[s.ID] != s {
		return
	}
	s.lastDone = time.Now()
}

// idleCheck runs when a session's idle timer fires. Commands do not move the
// timer: Begin and Done only count and note the time, keeping timer-heap
// work (which may wake one of the runtime's threads) off the command path.
// So the timer, when it fires, ends the session only if it has
// been idle a whole timeout, and otherwise sets itself for the rest: the end
// comes exactly Idle after the last command (or touch) ended, as if the timer
// had been reset each time. The check and the end are one step under the
// registry's lock, so a command that has begun is never cut off by it.
func (r *Registry) idleCheck(s *Session) {
	r.endThen(s, ReasonIdle, nil, func() bool {
		wait := s.Idle // a command is running: look again a whole timeout on
		if s.inflight == 0 {
			last := s.lastDone
			if last.IsZero() {
				last = s.added
			}
			wait = s.Idle - time.Since(last)
		}
		if wait > 0 {
			s.idle.Reset(wait)
			return false
		}
		return true
	})
}

// End ends a live session for reason: it stops the browser, releases the slot,
// counts and logs, once. It returns false if the session was not live. It
// takes the session, not its id: a driver may give a later session the id of
// one that has ended, and a late end of the first must not end the second.
func (r *Registry) End(s *Session, reason string) bool { return r.EndThen(s, reason, nil) }

// EndThen is End, calling removed (if not nil) once the session is no longer
// found — a command for it is refused from then on — and before its browser is
// stopped: DELETE answers its client there, so the teardown that follows costs
// the client nothing, while the slot stays held until the teardown is done.
func (r *Registry) EndThen(s *Session, reason string, removed func()) bool {
	return r.endThen(s, reason, removed, nil)
}

// endThen is EndThen for a session that still (if not nil) says, under the
// registry's lock, is to end.
func (r *Registry) endThen(s *Session, reason string, removed func(), still func() bool) bool {
	id := s.ID
	r.mu.Lock()
	if r.sessions[id] != s || still != nil && !still() {
		r.mu.Unlock()
		return false
	}
	delete(r.sessions, id)
	r.rememberLocked(id, reason, s)
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()
	if rs, ok := s.slot.(releasingSlot); ok {
		// Before removed: DELETE's answer must mean the slot is as good as
		// free for the client's next new session.
		rs.Releasing()
	}
	if removed != nil {
		removed()
	}
	s.once.Do(func() {
		close(s.ended)
		if s.idle != nil {
			s.idle.Stop()
		}
		if s.life != nil {
			s.life.Stop()
		}
		age := time.Since(s.Started).Round(time.Millisecond)
		details := []any{logtag.Browser(s.Browser + " " + s.Version), s.Instance.Describe(), logtag.Duration("after "+age.String(), age), logtag.Reason(reason, false)}
		if reason == ReasonCrashed {
			details = append(details, s.Instance.ExitReason())
		}
		// The launcher bounds a stop by its own -session-delete-timeout.
		if err := s.Instance.Stop(context.Background()); err != nil {
			details = append(details, "stop failed: "+err.Error())
		}
		s.slot.Release()
		r.ended.WithLabelValues(reason).Inc()
		logtag.Event(r.log, slog.LevelInfo, id, eventOf[reason], details...)
	})
	return true
}

func (r *Registry) rememberLocked(id, reason string, s *Session) {
	why := map[string]string{
		ReasonDeleted:     "it was deleted",
		ReasonIdle:        fmt.Sprintf("no command came for %v (the idle timeout: -timeout or sessionTimeout)", s.Idle),
		ReasonLifetime:    fmt.Sprintf("it reached the maximum session lifetime of %v (-max-session-lifetime)", r.opts.MaxLifetime),
		ReasonCrashed:     "the browser exited (" + s.Instance.ExitReason() + ")",
		ReasonClientGone:  "its client disconnected before the session was created",
		ReasonShutdown:    "the hub is shutting down",
		ReasonLastWindow:  "its last window was closed",
		ReasonDriverEnded: "its driver ended it (the browser's page crashed or hung, as the driver said to a command)",
	}[reason]
	r.recent[id] = endedRecord{why: why, owner: s.Owner, reason: reason}
	r.order = append(r.order, id)
	if len(r.order) > r.opts.Remember {
		delete(r.recent, r.order[0])
		r.order = r.order[1:]
	}
}

// Settled waits until no session end is under way: every browser that was
// being stopped is stopped and its slot released. (DELETE answers before its
// teardown finishes.)
func (r *Registry) Settled() { r.wg.Wait() }

// IdleFor says how long a session has had no command running (0 while one
// runs): what its idle timeout counts.
func (r *Registry) IdleFor(s *Session) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.inflight > 0 {
		return 0
	}
	last := s.lastDone
	if last.IsZero() {
		last = s.Started
	}
	return time.Since(last)
}

// endedRecord is what is remembered of an ended session.
type endedRecord struct{ why, owner, reason string }

// Ended says why a recently ended session ended.
func (r *Registry) Ended(id string) (string, bool) {
	why, _, ok := r.EndedOwned(id)
	return why, ok
}

// EndedOwned is Ended with the session's owner: why it ended is its
// owner's to know, not any user's who guesses its id.
func (r *Registry) EndedOwned(id string) (why, owner string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.recent[id]
	return e.why, e.owner, ok
}

// EndedReason is the reason (ReasonDeleted, …) a recently ended session
// ended, and its owner.
func (r *Registry) EndedReason(id string) (reason, owner string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.recent[id]
	return e.reason, e.owner, ok
}

// List returns the live sessions, oldest first.
func (r *Registry) List() []*Session {
	r.mu.Lock()
	out := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		out = append(out, s)
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// Len is the number of live sessions.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// EndAll ends every live session for reason, in parallel, and waits for every End
// in progress to finish.
func (r *Registry) EndAll(reason string) {
	var wg sync.WaitGroup
	for _, s := range r.List() {
		wg.Go(func() { r.End(s, reason) })
	}
	wg.Wait()
	r.wg.Wait()
}
