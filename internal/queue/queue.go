// Package queue is WebSummoner's session queue: -limit slots, first-in first-out
// waiters, and the CoDel-style idle rule of docs/queue.md that gives each queued
// request its wait budget. It knows nothing of HTTP; it returns typed outcomes.
package queue

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/logtag"
)

// Reason says why a request was not admitted.
type Reason string

// Reasons, also the values of the rejected_total metric's reason label.
const (
	// ReasonNoWait: the client sent a no-wait header and no slot was free.
	ReasonNoWait Reason = "no_wait"
	// ReasonTimeout: the keeping-up budget (-queue-timeout) ran out.
	ReasonTimeout Reason = "timeout"
	// ReasonShed: the saturated budget (-queue-congestion-timeout) ran out.
	ReasonShed Reason = "shed"
	// ReasonDisabled: -disable-queue is set and no slot was free.
	ReasonDisabled Reason = "disabled"
	// ReasonFull: the queue already holds -queue-max requests.
	ReasonFull Reason = "full"
	// ReasonQuota: the request's tenant already has its maxQueued requests
	// waiting (-quotas).
	ReasonQuota Reason = "quota"
	// ReasonClosed: the hub is shutting down (Close).
	ReasonClosed Reason = "shutdown"
	// ReasonCancelled: the client went away first. Nothing is answered and no
	// metric counts it as a rejection.
	ReasonCancelled Reason = "cancelled"
)

// State is the grid's state as seen by a request when it queued.
type State int

// States of the idle rule.
const (
	// KeepingUp: idle ≤ -queue-timeout (or the timeout is unset).
	KeepingUp State = iota
	// Saturated: idle > -queue-timeout.
	Saturated
)

func (s State) String() string {
	if s == Saturated {
		return "saturated"
	}
	return "keeping up"
}

// StartOutcome is how a browser start ended, for the start gate.
type StartOutcome int

// Start outcomes.
const (
	// StartSucceeded: the driver answered and the session was created.
	StartSucceeded StartOutcome = iota
	// StartFailed: an engine error, or a start that missed its deadline.
	StartFailed
	// StartIgnored: the client's fault (bad capabilities) or the client left.
	StartIgnored
)

func (o StartOutcome) String() string {
	return [...]string{"success", "failure", "ignored"}[o]
}

// Gate limits concurrent browser starts (internal/capacity). The queue admits a
// waiter only when a slot is free AND the gate permits a start, so time spent
// waiting for the gate is queue wait, under the same budgets.
type Gate interface {
	// TryStart reserves a start of the given cost (how many containers it starts,
	// ≥ 1). It is called with the queue's lock held and must not call back into
	// the queue.
	TryStart(cost int) bool
	// CanStart reports whether TryStart(cost) would succeed now.
	CanStart(cost int) bool
	// FinishStart ends a reserved start of that cost; kind is what was
	// started (Request.Kind), whose starts are compared with each other.
	FinishStart(cost int, kind string, o StartOutcome, latency time.Duration)
	// Notify gives the gate the function to call, outside its own lock, whenever
	// it may newly permit a start without a slot being released (its limit rose,
	// the engine came back). The queue passes its Kick; without it, waiters
	// would sit until the next release.
	Notify(wake func())
}

// Request is what the queue needs to know about a new-session request.
type Request struct {
	// ID identifies the request in log lines.
	ID string
	// NoWait refuses the request at once instead of queueing it.
	NoWait bool
	// Cost is what its start weighs with the start gate: the containers it
	// starts (a browser with a video recorder is 2). Zero means 1.
	Cost int
	// Tenant is who the request is for (its user under -htpasswd): slots are
	// shared between tenants by their quotas' weights. "" is everyone.
	Tenant string
	// Bytes is what the request holds in memory while it waits (its
	// capabilities), counted against Options.MaxWaitingBytes.
	Bytes int64
	// Kind is what its start starts (the browsers.json entry): a start is
	// judged slow against starts of its own kind only, as one browser's
	// normal start may be many times another's.
	Kind string
}

func (r Request) cost() int { return max(r.Cost, 1) }

// Outcome is the queue's answer to one Acquire.
type Outcome struct {
	// Admitted is true when a slot was taken; Reason is then empty.
	Admitted bool
	// Reason says why the request was refused.
	Reason Reason
	// Queued says the request waited in the queue (it found every slot busy).
	Queued bool
	// State is the grid's state when the request queued (or was refused on arrival).
	State State
	// Idle is the time since the last fast admission when the request arrived.
	Idle time.Duration
	// Budget is the wait allowed to the request; 0 with Queued means unbounded.
	Budget time.Duration
	// Waited is how long the request spent in the queue.
	Waited time.Duration
	// Fast says the admission counted as fast and reset idle.
	Fast bool
	// RetryAfter is the hint for a refused client, a whole number of seconds drawn
	// uniformly from [1, -queue-timeout] (or [1, DefaultRetryAfterMax] when unset).
	RetryAfter time.Duration

	limit int
	opts  *Options
	// Tenant and quota are the tenant's name and its maxQueued, for a
	// ReasonQuota message.
	tenant string
	quota  int
	// held is what the waiters held when a ReasonFull refusal was for
	// -queue-max-bytes (0: it was for -queue-max).
	held, bytes int64
	// For a request that may not wait (ReasonNoWait, ReasonDisabled): the
	// slots free or being torn down and the requests already waiting for them
	// when it arrived, its tenant's maxSessions if that refused it, turn if
	// it had a slot and waited for its start's turn, saturated if it had one
	// but the saturated budget is 0.
	free, ahead, maxSessions int
	turn, saturated          bool
}

// Message explains a refusal to the client: which budget ran out, how long the
// request waited, the grid's state and the flag to change.
func (o Outcome) Message() string {
	switch o.Reason {
	case ReasonNoWait:
		return o.whyNoSlot() + " and the request asked not to wait (X-WebSummoner-No-Wait or X-Selenoid-No-Wait header); retry later or drop the header to queue"
	case ReasonDisabled:
		return o.whyNoSlot() + " and queueing is off (-disable-queue); retry later, raise -limit, or remove -disable-queue to let requests wait"
	case ReasonTimeout:
		return fmt.Sprintf("queue timeout: waited %v for one of %d slots, queued while the grid was keeping up; the keeping-up budget of %v (-queue-timeout) ran out; consider raising -limit, or -queue-timeout to wait longer",
			o.Waited.Round(time.Millisecond), o.limit, o.Budget)
	case ReasonShed:
		return fmt.Sprintf("grid saturated: when this request arrived, no request had been admitted within %v of queueing for %v (more than -queue-timeout %v), so it got the saturated budget of %v (-queue-congestion-timeout) and waited %v; the grid needs capacity (free or add slots, fix browsers that hang), not patience",
			o.opts.FastThreshold, o.Idle.Round(time.Second), o.opts.Timeout, o.Budget, o.Waited.Round(time.Millisecond))
	case ReasonCancelled:
		return "the client went away while waiting for a slot"
	case ReasonFull:
		if o.held > 0 {
			return fmt.Sprintf("%s and the requests already waiting hold %s of capabilities: with this one's %s that is over -queue-max-bytes (%s); retry later, raise -queue-max-bytes, or send smaller capabilities (browser extensions are the large part)", o.whyNoSlot(), sizeString(o.held), sizeString(o.bytes), sizeString(o.opts.MaxWaitingBytes))
		}
		return fmt.Sprintf("%s and %d requests already wait (-queue-max); retry later or raise -queue-max", o.whyNoSlot(), o.opts.MaxWaiting)
	case ReasonClosed:
		return "the hub is shutting down and admits no new sessions; retry on another hub or after the restart"
	case ReasonQuota:
		return fmt.Sprintf("quota: %d requests of %q already wait, its maxQueued (-quotas); retry later, or ask the grid's operator for a larger quota", o.quota, o.tenant)
	}
	return "admitted"
}

// whyNoSlot says why a request that may not wait got no slot.
func (o Outcome) whyNoSlot() string {
	switch {
	case o.turn:
		return fmt.Sprintf("a slot was free, but its browser's start did not get its turn within %v: the start gate paces starts to what the host takes now, and a slot being torn down is free only once its browser is gone (see /status \"gate\")", o.Budget)
	case o.saturated:
		return fmt.Sprintf("the grid is saturated (no request admitted within %v of queueing for %v) and -queue-congestion-timeout is 0, which refuses every request that would wait, even for its start's turn", o.opts.FastThreshold, o.Idle.Round(time.Second))
	case o.maxSessions > 0:
		return fmt.Sprintf("%q already runs its maxSessions of %d (-quotas)", o.tenant, o.maxSessions)
	case o.free > 0:
		return fmt.Sprintf("the %d slots of %d (-limit) free or being freed are promised to the %d requests already waiting", o.free, o.limit, o.ahead)
	}
	return fmt.Sprintf("all %d slots (-limit) are busy", o.limit)
}

// Slot is one of the -limit slots, held by an admitted request, with the start
// permit it was admitted with. Release returns it.
type Slot struct {
	q         *Queue
	released  atomic.Bool
	releasing atomic.Bool // Releasing was called: the slot is being torn down
	started   atomic.Bool // the start permit has been given back
	admitted  time.Time
	cost      int
	kind      string
	tenant    *tenant // whose session holds it (set under Queue.mu); nil for a spare slot not yet assigned
}

// Started reports how the browser start ended; from then on the session counts
// against -limit only, not against the start gate. Only the first call counts.
func (s *Slot) Started(o StartOutcome) {
	if s == nil || s.q.opts.Gate == nil || !s.started.CompareAndSwap(false, true) {
		return
	}
	s.q.opts.Gate.FinishStart(s.cost, s.kind, o, time.Since(s.admitted))
}

// Restart takes a start permit again for a slot whose start has ended: a
// warm browser handed to a client whose own session is then created on it
// (a near hit) starts a browser, as a cold start does, and the gate paces
// it so. kind names that start for the gate's baselines. It waits for the
// permit until ctx ends, before any queued request (the slot is held
// already), and returns ctx's error if it ends first. Started reports how
// the start went; Release gives the permit back if it was not reported.
func (s *Slot) Restart(ctx context.Context, kind string) error {
	if s == nil || s.q.opts.Gate == nil {
		return nil
	}
	q := s.q
	q.mu.Lock()
	if !s.started.Load() || s.released.Load() {
		q.mu.Unlock()
		return nil // its start still holds a permit, or it is gone
	}
	r := &restart{slot: s, kind: kind, ready: make(chan struct{})}
	q.restarts = append(q.restarts, r)
	q.restartLocked()
	q.mu.Unlock()
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if r.granted {
		return nil // the permit is the slot's; Started or Release gives it back
	}
	q.restarts = slices.DeleteFunc(q.restarts, func(o *restart) bool { return o == r })
	return ctx.Err()
}

// restartLocked grants waiting restarts their permits, oldest first, while
// the gate permits them.
func (q *Queue) restartLocked() {
	for len(q.restarts) > 0 {
		r := q.restarts[0]
		if !q.tryStartLocked(r.slot.cost) {
			return
		}
		q.restarts = q.restarts[1:]
		r.granted = true
		r.slot.kind, r.slot.admitted = r.kind, time.Now()
		r.slot.started.Store(false)
		close(r.ready)
	}
}

// Release gives the slot back, handing it to the oldest live waiter if there is one.
// A start not yet reported counts as ignored. It is safe to call more than once;
// only the first call counts.
func (s *Slot) Release() {
	if s == nil || !s.released.CompareAndSwap(false, true) {
		return
	}
	s.Started(StartIgnored)
	s.q.release(s)
}

// Releasing says the slot's session has ended and its browser is being torn
// down: the slot will be released soon. Until then it still counts against
// -limit (the browser still runs), but a request that may not wait for a
// slot — a no-wait request, or any request under -disable-queue — and
// arrives meanwhile waits for it instead of being refused: the sequential
// pattern of a CI run (DELETE, then at once a new session) must find the
// slot it just gave up. Only the first call counts.
func (s *Slot) Releasing() {
	if s == nil {
		return
	}
	// Under the queue's lock, as release reads the flag: a Release that
	// overtakes this call finds it unset, or its count taken.
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	if s.released.Load() || !s.releasing.CompareAndSwap(false, true) {
		return
	}
	s.q.releasing++
	if s.tenant != nil {
		s.tenant.releasing++
	}
}

type waiter struct {
	req     Request
	ctx     context.Context
	queued  time.Time
	granted bool          // set under Queue.mu when a slot is handed over
	closed  bool          // set under Queue.mu when Close refuses it
	waited  time.Duration // set with granted
	fast    bool          // set with granted
	ready   chan struct{} // closed when granted
	elem    *list.Element // nil once out of the list
	tenant  *tenant
	telem   *list.Element // in tenant.waiters; nil once out of it
	fire    func()        // set by Notify: called (under Queue.mu) when ready closes
}

// Queue hands out -limit slots to new-session requests.
type Queue struct {
	opts Options
	log  *slog.Logger
	m    *metrics

	mu      sync.Mutex
	closed  bool
	drained chan struct{} // closed once the queue is closed and no slot is held
	inUse   int
	// releasing counts slots whose session has ended and whose browser is
	// being torn down (Slot.Releasing): soon free.
	releasing int
	waiters   list.List // of *waiter, oldest first
	// waitingBytes is the sum of the waiters' Request.Bytes.
	waitingBytes int64
	lastFast     time.Time         // time of the last fast admission; idle = now - lastFast
	rejected     map[Reason]uint64 // refusals so far, by reason (Rejected)
	tenants      map[string]*tenant
	backlog      []*tenant // the tenants with waiters: a hand-off looks at these alone
	// vnow is the virtual time the last admission started at (start-time
	// fair queuing): the system's while nobody waits (virtualNowLocked). A
	// tenant new to the queue starts at the system's, and one that starts
	// waiting joins no earlier: starts nobody contested are no debt, and a
	// tenant that still holds a session erases none by leaving the queue to
	// rejoin (one that holds and waits for nothing is forgotten).
	vnow   float64
	quotas *Quotas
	// restarts are slot holders waiting for a start permit again
	// (Slot.Restart), oldest first: served before queued requests.
	restarts []*restart
}

// restart is a slot holder's wait for a start permit (Slot.Restart).
type restart struct {
	slot    *Slot
	kind    string
	ready   chan struct{}
	granted bool
}

// New returns a queue. Options are resolved here, so raw flag values may be passed.
// A fresh queue counts as just admitted fast: a grid that has just started is not
// saturated. A nil logger discards; a nil registerer registers nothing.
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Queue, error) {
	opts, err := opts.Resolve()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	q := &Queue{opts: opts, log: logger, lastFast: time.Now(), drained: make(chan struct{}), quotas: opts.Quotas}
	q.m, err = newMetrics(q, reg)
	if err != nil {
		return nil, err
	}
	if opts.Gate != nil {
		opts.Gate.Notify(q.Kick)
	}
	return q, nil
}

// Options returns the resolved options the queue runs with.
func (q *Queue) Options() Options { return q.opts }

// Acquire takes a slot for r, waiting in first-in first-out order when all are busy.
// It returns a Slot exactly when the outcome is Admitted. When ctx ends first the
// outcome is ReasonCancelled and any slot handed over meanwhile has been released.
func (q *Queue) Acquire(ctx context.Context, r Request) (*Slot, Outcome) {
	s, out, waiting := q.Enqueue(ctx, r)
	if waiting == nil {
		return s, out
	}
	return waiting.Wait()
}

// Waiting is a queued request (Enqueue). Exactly one of Wait and Notify must be
// called, once.
type Waiting struct {
	q   *Queue
	ctx context.Context
	r   Request
	w   *waiter
	out Outcome
}

// Wait blocks until the request is admitted, its budget runs out, the queue
// closes or its context ends, as Acquire does.
func (wt *Waiting) Wait() (*Slot, Outcome) {
	var expired <-chan time.Time
	if wt.out.Budget > 0 {
		t := time.NewTimer(wt.out.Budget - time.Since(wt.w.queued))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-wt.w.ready:
	case <-expired:
	case <-wt.ctx.Done():
	}
	return wt.q.settle(wt.ctx, wt.r, wt.w, wt.out)
}

// Notify is Wait without a goroutine blocked in it: done is called, on a
// goroutine of its own, with what Wait would have returned. A waiting request
// then costs a timer and a context callback, no stack.
func (wt *Waiting) Notify(done func(*Slot, Outcome)) {
	var (
		mu      sync.Mutex
		settled bool
		timer   *time.Timer
		stopCtx func() bool
	)
	settle := func() {
		mu.Lock()
		if settled {
			mu.Unlock()
			return
		}
		settled = true
		t, stop := timer, stopCtx
		mu.Unlock()
		if t != nil {
			t.Stop()
		}
		if stop != nil {
			stop()
		}
		done(wt.q.settle(wt.ctx, wt.r, wt.w, wt.out))
	}
	q, w := wt.q, wt.w
	q.mu.Lock()
	w.fire = func() { go settle() }
	resolved := w.granted || w.closed
	q.mu.Unlock()
	mu.Lock()
	if wt.out.Budget > 0 {
		timer = time.AfterFunc(wt.out.Budget-time.Since(w.queued), settle)
	}
	stopCtx = context.AfterFunc(wt.ctx, settle)
	mu.Unlock()
	if resolved {
		go settle()
	}
}

// Enqueue is Acquire in two steps, for a caller that waits somewhere else than
// where it asked (the hub hands a queued request's connection to a small
// goroutine of its own). It answers at once — admitted, or refused — with wait
// nil; or it queues r and returns wait, which blocks until r is admitted, its
// budget runs out, the queue closes or ctx ends, exactly as Acquire. wait must
// be called once. The budget counts from Enqueue.
func (q *Queue) Enqueue(ctx context.Context, r Request) (*Slot, Outcome, *Waiting) {
	if ctx.Err() != nil {
		// The client left before it asked: no slot for it.
		return nil, Outcome{Reason: ReasonCancelled, limit: q.opts.Limit, opts: &q.opts}, nil
	}
	q.mu.Lock()
	now := time.Now()
	idle := now.Sub(q.lastFast)
	if q.closed {
		return nil, q.refuseLocked(r, Outcome{Idle: idle, limit: q.opts.Limit, opts: &q.opts}, ReasonClosed), nil
	}
	t := q.tenantLocked(r.Tenant)
	// A free slot no waiter may take (each of their tenants runs its
	// maxSessions) is this request's at once, if its own tenant may run:
	// a tenant at its quota holds no other tenant back, nor fills the queue
	// against it.
	if q.inUse < q.opts.Limit && q.runnableWaitersLocked() == 0 && len(q.restarts) == 0 && q.mayRunLocked(t) && q.tryStartLocked(r.cost()) {
		q.inUse++
		q.admitLocked(t)
		q.lastFast = now
		q.mu.Unlock()
		q.m.wait.Observe(0)
		return &Slot{q: q, admitted: now, cost: r.cost(), kind: r.Kind, tenant: t}, Outcome{Admitted: true, Fast: true, Idle: idle, limit: q.opts.Limit, opts: &q.opts}, nil
	}
	out := Outcome{Idle: idle, State: q.stateAt(idle), limit: q.opts.Limit, opts: &q.opts, tenant: r.Tenant}
	if q.opts.Disabled || r.NoWait {
		return q.mayNotWaitLocked(ctx, r, t, now, out)
	}
	if mq := t.quota.MaxQueued; mq > 0 && t.waiters.Len() >= mq {
		out.quota = mq
		return nil, q.refuseLocked(r, out, ReasonQuota), nil
	}
	if q.opts.MaxWaiting > 0 && q.waiters.Len() >= q.opts.MaxWaiting {
		q.whyWaitLocked(t, &out)
		return nil, q.refuseLocked(r, out, ReasonFull), nil
	}
	// The first waiter always may wait, however large: the bound is on what
	// many requests hold together, and one alone is bounded by its body's limit.
	if mb := q.opts.MaxWaitingBytes; mb > 0 && q.waiters.Len() > 0 && q.waitingBytes+r.Bytes > mb {
		out.held, out.bytes = max(q.waitingBytes, 1), r.Bytes
		q.whyWaitLocked(t, &out)
		return nil, q.refuseLocked(r, out, ReasonFull), nil
	}
	if out.State == Saturated {
		out.Budget = q.opts.SaturatedBudget
		if out.Budget == 0 {
			return nil, q.refuseLocked(r, out, ReasonShed), nil
		}
	} else {
		out.Budget = q.opts.KeepingUpBudget
	}
	return q.queueLocked(ctx, r, now, out)
}

// runnableWaitersLocked counts the waiters that may take a slot once one is
// free: those a free slot is promised to. A waiter whose tenant runs its
// maxSessions is promised none.
func (q *Queue) runnableWaitersLocked() int {
	n := 0
	for _, t := range q.backlog {
		if q.mayRunLocked(t) {
			n += t.waiters.Len()
		}
	}
	return n
}

// whyWaitLocked records in out why a request of t would have had to wait,
// for its message: its tenant at maxSessions, or the free slots promised
// to the waiters ahead; else every slot is busy.
func (q *Queue) whyWaitLocked(t *tenant, out *Outcome) {
	out.free, out.ahead = q.opts.Limit-q.inUse+q.releasing, q.runnableWaitersLocked()
	if !q.mayRunLocked(t) {
		out.maxSessions = t.quota.MaxSessions
	}
}

// mayNotWaitReason is why a request that may not wait for a slot is refused.
func (q *Queue) mayNotWaitReason() Reason {
	if q.opts.Disabled {
		return ReasonDisabled
	}
	return ReasonNoWait
}

// maxTurns bounds the start turns a request that may not wait waits for.
const maxTurns = 10

// mayNotWaitLocked answers a request that may not wait for a slot (no-wait,
// or -disable-queue) and found none it could take at once, and unlocks. It is
// refused if it would have to wait for another session to end: every slot is
// busy (or promised to the requests already waiting), or its tenant runs its
// maxSessions. A slot free for it, or being torn down, is its own: it then
// waits only for its start's turn — the start gate paces starts to what the
// host takes — or for the teardown, as long as a browser may take to start or
// stop (Options.TurnTimeout) and within its state's budget. Refused for
// every slot busy, the sequential CI pattern (DELETE, then at once a new
// session), or parallel jobs on a hub that has just started, would fail
// where Selenoid starts them.
func (q *Queue) mayNotWaitLocked(ctx context.Context, r Request, t *tenant, now time.Time, out Outcome) (*Slot, Outcome, *Waiting) {
	reason := q.mayNotWaitReason()
	out.free = q.opts.Limit - q.inUse + q.releasing
	out.ahead = q.runnableWaitersLocked()
	switch {
	case t.quota.MaxSessions > 0 && t.running-t.releasing+t.waiters.Len() >= t.quota.MaxSessions:
		// A session of its own being torn down counts as free for it, as a
		// slot being torn down does (DELETE, then a new session at once),
		// unless a request of its own already waits for it.
		out.maxSessions = t.quota.MaxSessions
		return nil, q.refuseLocked(r, out, reason), nil
	case out.free <= out.ahead:
		return nil, q.refuseLocked(r, out, reason), nil
	}
	out.Budget = q.opts.KeepingUpBudget
	if out.State == Saturated {
		if out.Budget = q.opts.SaturatedBudget; out.Budget == 0 {
			out.saturated = true
			return nil, q.refuseLocked(r, out, reason), nil
		}
	}
	if tt := q.opts.TurnTimeout; tt > 0 {
		// Each request ahead may take a start's turn before this one, up to
		// maxTurns of them: a request that asked not to wait does not wait
		// an hour behind a hundred others.
		tt *= time.Duration(1 + min(out.ahead, maxTurns-1))
		if out.Budget == 0 || tt < out.Budget {
			out.Budget = tt
		}
	}
	out.turn = true
	return q.queueLocked(ctx, r, now, out)
}

// Spare takes a slot for a warm-pool fill, the lowest-priority start: only
// when a slot is free, no request waits that may take it (one whose tenant
// runs its maxSessions may not), no slot is being torn down for a
// request to find, and the start gate would still permit a client's start
// (of cost 1) beside this one. It returns nil otherwise. A spare admission is
// no client's: it neither resets idle nor counts in the wait histogram. kind
// is what it starts, as Request.Kind.
func (q *Queue) Spare(cost int, kind string) *Slot {
	cost = max(cost, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.inUse >= q.opts.Limit || q.runnableWaitersLocked() > 0 || q.releasing > 0 || len(q.restarts) > 0 {
		return nil
	}
	if g := q.opts.Gate; g != nil && !trySpare(g, cost) {
		return nil
	}
	q.inUse++
	return &Slot{q: q, admitted: time.Now(), cost: cost, kind: kind}
}

// SpareGate is a start gate that knows a warm-pool fill from a client's
// start (internal/capacity's does): TrySpare reserves a start of cost only
// if a client's start of cost 1 would still be permitted beside it, and
// counts the permit left to clients as taken when the gate judges whether
// it was full, so that fills alone can grow it.
type SpareGate interface {
	TrySpare(cost int) bool
}

// trySpare reserves a fill's start with g: through TrySpare where g has it,
// else as a start that leaves one permit to clients.
func trySpare(g Gate, cost int) bool {
	if sg, ok := g.(SpareGate); ok {
		return sg.TrySpare(cost)
	}
	return g.CanStart(cost+1) && g.TryStart(cost)
}

// AdmittedFast records a client's admission that did not go through the
// queue (a warm browser handed over at once): it is a fast admission, and
// resets idle as one.
func (q *Queue) AdmittedFast() {
	q.mu.Lock()
	q.lastFast = time.Now()
	q.mu.Unlock()
	q.m.wait.Observe(0)
}

// Full reports whether every slot is held: a request arriving now could not
// be admitted for want of a slot (the start gate aside).
func (q *Queue) Full() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inUse >= q.opts.Limit
}

// queueLocked puts r at the back of the queue with out's budget, and unlocks.
func (q *Queue) queueLocked(ctx context.Context, r Request, now time.Time, out Outcome) (*Slot, Outcome, *Waiting) {
	out.Queued = true
	w := &waiter{req: r, ctx: ctx, queued: now, ready: make(chan struct{}), tenant: q.tenantLocked(r.Tenant)}
	if w.tenant.waiters.Len() == 0 {
		q.backloggedLocked(w.tenant)
	}
	w.elem = q.waiters.PushBack(w)
	w.telem = w.tenant.waiters.PushBack(w)
	q.waitingBytes += r.Bytes
	if q.inUse < q.opts.Limit {
		// A slot is free but the waiters ahead may not take it (their
		// tenants are at maxSessions, or the gate holds them): this one may.
		q.dispatchLocked(now)
	}
	q.mu.Unlock()
	logtag.Event(q.log, slog.LevelDebug, r.ID, "QUEUED", out.State, "budget "+budgetString(out.Budget))
	return nil, out, &Waiting{q: q, ctx: ctx, r: r, w: w, out: out}
}

// settle ends a queued request's wait: admitted if a slot was handed over (and
// its client is still there), else refused for why it stopped waiting.
func (q *Queue) settle(ctx context.Context, r Request, w *waiter, out Outcome) (*Slot, Outcome) {
	q.mu.Lock()
	if w.granted {
		q.mu.Unlock()
		out.Waited, out.Fast = w.waited, w.fast
		s := &Slot{q: q, admitted: w.queued.Add(w.waited), cost: r.cost(), kind: r.Kind, tenant: w.tenant}
		if ctx.Err() != nil {
			// The client left as the slot arrived: pass it on rather than leak it.
			s.Release()
			return nil, q.cancelled(out, r)
		}
		out.Admitted = true
		q.m.wait.Observe(out.Waited.Seconds())
		return s, out
	}
	q.removeLocked(w)
	out.Waited = time.Since(w.queued)
	if w.closed {
		return nil, q.refuseLocked(r, out, ReasonClosed)
	}
	if ctx.Err() != nil {
		q.mu.Unlock()
		return nil, q.cancelled(out, r)
	}
	switch {
	case out.turn:
		return nil, q.refuseLocked(r, out, q.mayNotWaitReason())
	case out.State == Saturated:
		return nil, q.refuseLocked(r, out, ReasonShed)
	}
	return nil, q.refuseLocked(r, out, ReasonTimeout)
}

// Close refuses every waiting request and every later one with ReasonClosed;
// slots already held stay held until released. The hub calls it when it drains.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	q.drainedLocked()
	for e := q.waiters.Front(); e != nil; e = q.waiters.Front() {
		w := e.Value.(*waiter)
		q.removeLocked(w)
		w.closed = true
		close(w.ready)
		if w.fire != nil {
			w.fire()
		}
	}
}

func (q *Queue) stateAt(idle time.Duration) State {
	if q.opts.Timeout > 0 && idle > q.opts.Timeout {
		return Saturated
	}
	return KeepingUp
}

// refuseLocked completes a refusal: it draws Retry-After, unlocks, counts and logs.
func (q *Queue) refuseLocked(r Request, out Outcome, reason Reason) Outcome {
	out.Reason = reason
	out.RetryAfter = q.RetryAfter()
	if q.rejected == nil {
		q.rejected = map[Reason]uint64{}
	}
	q.rejected[reason]++
	if t := q.tenants[r.Tenant]; t != nil {
		q.forgetLocked(t)
	}
	q.mu.Unlock()
	q.m.rejected.WithLabelValues(string(reason)).Inc()
	tag := map[Reason]string{
		ReasonNoWait:   "QUEUE_NO_WAIT",
		ReasonDisabled: "QUEUE_DISABLED",
		ReasonTimeout:  "QUEUE_TIMEOUT",
		ReasonShed:     "QUEUE_SHED",
		ReasonClosed:   "QUEUE_CLOSED",
		ReasonFull:     "QUEUE_FULL",
		ReasonQuota:    "QUEUE_QUOTA",
	}[reason]
	waited := out.Waited.Round(time.Millisecond)
	budget := "budget " + budgetString(out.Budget)
	if !out.Queued {
		// Refused without a wait: a budget of 0 here is none, not unbounded.
		budget = "not queued"
	}
	retry := fmt.Sprintf("retry after %ds", int(out.RetryAfter/time.Second))
	if reason == ReasonDisabled {
		retry = "no retry-after" // the 500 of -disable-queue carries none (errors.go)
	}
	logtag.Event(q.log, slog.LevelInfo, r.ID, tag, out.State, logtag.Duration("waited "+waited.String(), waited),
		budget, retry, logtag.Reason(string(reason), false))
	return out
}

func (q *Queue) cancelled(out Outcome, r Request) Outcome {
	out.Reason = ReasonCancelled
	waited := out.Waited.Round(time.Millisecond)
	logtag.Event(q.log, slog.LevelInfo, r.ID, "CLIENT_DISCONNECTED", logtag.Duration("left the queue after "+waited.String(), waited), logtag.Reason("client gone", false))
	return out
}

// RetryAfter draws a Retry-After hint: a whole number of seconds, uniform over
// [1, -queue-timeout] (or [1, DefaultRetryAfterMax] while it is unset), so that
// refused clients do not all come back on the same second.
func (q *Queue) RetryAfter() time.Duration {
	hi := q.opts.Timeout
	if hi == 0 {
		hi = DefaultRetryAfterMax
	}
	n := max(int(hi/time.Second), 1)
	return time.Duration(1+rand.IntN(n)) * time.Second
}

func (q *Queue) removeLocked(w *waiter) {
	if w.elem != nil {
		q.waiters.Remove(w.elem)
		w.elem = nil
		q.waitingBytes -= w.req.Bytes
	}
	if w.telem != nil {
		w.tenant.waiters.Remove(w.telem)
		w.telem = nil
		if w.tenant.waiters.Len() == 0 {
			q.unbackloggedLocked(w.tenant)
		}
		q.forgetLocked(w.tenant)
	}
}

func (q *Queue) release(s *Slot) {
	q.mu.Lock()
	q.inUse--
	if s.releasing.Load() {
		q.releasing--
	}
	if t := s.tenant; t != nil {
		t.running--
		if s.releasing.Load() {
			t.releasing--
		}
		q.forgetLocked(t)
	}
	q.dispatchLocked(time.Now())
	q.drainedLocked()
	q.mu.Unlock()
}

func (q *Queue) drainedLocked() {
	if q.closed && q.inUse == 0 {
		select {
		case <-q.drained:
		default:
			close(q.drained)
		}
	}
}

// Drained is closed once the queue is closed and every slot has been released:
// no session is running and none is starting.
func (q *Queue) Drained() <-chan struct{} { return q.drained }

// Kick admits waiters that have become admissible without a slot being released:
// the gate calls it when it permits more starts.
func (q *Queue) Kick() {
	q.mu.Lock()
	q.dispatchLocked(time.Now())
	q.mu.Unlock()
}

func (q *Queue) tryStartLocked(cost int) bool {
	return q.opts.Gate == nil || q.opts.Gate.TryStart(cost)
}

// dispatchLocked hands free slots to live waiters, in nextLocked's order:
// first in, first out with one tenant. Waiters whose client has gone are
// dropped on the way (their Acquire returns Cancelled), so a slot never goes
// to a client that left. The admission's speed is judged here, at hand-over.
func (q *Queue) dispatchLocked(now time.Time) {
	q.restartLocked()
	if len(q.restarts) > 0 {
		return // the gate's next permit is a slot holder's
	}
	for q.inUse < q.opts.Limit {
		w := q.nextLocked()
		if w == nil {
			return
		}
		if !q.tryStartLocked(w.req.cost()) {
			return
		}
		q.admitLocked(w.tenant) // before removeLocked, which forgets an idle tenant
		q.removeLocked(w)
		q.inUse++
		w.granted = true
		w.waited = now.Sub(w.queued)
		if w.waited <= q.opts.FastThreshold {
			w.fast = true
			q.lastFast = now
		}
		close(w.ready)
		if w.fire != nil {
			w.fire()
		}
	}
}

// Stats is a snapshot of the queue for /status and tests.
type Stats struct {
	// Limit is -limit.
	Limit int
	// InUse is the number of slots held.
	InUse int
	// Waiting is the number of queued requests.
	Waiting int
	// WaitingBytes is what they hold (the sum of their Request.Bytes).
	WaitingBytes int64
	// Idle is the time since the last fast admission.
	Idle time.Duration
	// OldestWait is how long the oldest waiter has waited; 0 with none.
	OldestWait time.Duration
	// Congested is true exactly while a request arriving now would queue with the
	// saturated budget.
	Congested bool
}

// Rejected counts the requests refused so far, by reason.
func (q *Queue) Rejected() map[Reason]uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[Reason]uint64, len(q.rejected))
	for r, n := range q.rejected {
		out[r] = n
	}
	return out
}

// Stats returns the queue's state now.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	s := Stats{Limit: q.opts.Limit, InUse: q.inUse, Waiting: q.waiters.Len(), WaitingBytes: q.waitingBytes, Idle: now.Sub(q.lastFast)}
	if e := q.waiters.Front(); e != nil {
		s.OldestWait = now.Sub(e.Value.(*waiter).queued)
	}
	full := q.inUse >= q.opts.Limit || s.Waiting > 0 || (q.opts.Gate != nil && !q.opts.Gate.CanStart(1))
	s.Congested = full && !q.opts.Disabled && q.stateAt(s.Idle) == Saturated
	return s
}

// sizeString writes n bytes as people read them: 512 bytes, 1.5 MiB, 4.0 GiB.
func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

func budgetString(d time.Duration) string {
	if d == 0 {
		return "unbounded"
	}
	return d.String()
}
