// Package pool keeps browsers ready before they are asked for: each is a
// started browser with a WebDriver session already created, held on one of
// the queue's slots, and a client whose request matches takes it at once. A
// ready browser serves one client at most and is never given back: it ends
// with that client's session. What a browser is, how it starts and how a
// request matches it are the hub's (Filler, Item); the pool decides how many
// to keep of which, when to start them, and which to throw away.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/logtag"
	wsmetrics "github.com/websummoner/websummoner/internal/metrics"
)

// Key names the browsers.json entry a ready browser was started for.
type Key struct{ Browser, Version string }

func (k Key) String() string { return k.Browser + " " + k.Version }

// Item is one ready browser, as the hub started it.
type Item interface {
	// Alive reports whether the browser still answers WebDriver; the pool asks
	// it before handing the browser out.
	Alive(ctx context.Context) bool
	// Exited is closed when the browser ends on its own.
	Exited() <-chan struct{}
	// Stale reports whether the entry the browser was started from has since
	// changed or gone (browsers.json reloaded).
	Stale() bool
	// Discard frees the browser: its slot counts as being released at once (a
	// request arriving meanwhile may wait for it rather than be refused) and
	// is released once the browser has stopped. It returns before the stop
	// is done.
	Discard()
}

// HandOver is an Item that a near hit hands over only once the client's
// own session has been created on it. Until then the pool counts it as a
// refill under way and starts none for it: the client's browser is starting,
// and a fill, the lowest-priority start, would take the host from it (on 2
// cores, a container and a Chromium starting beside a near hit's Chromium
// made it as slow as a cold start).
type HandOver interface {
	// HandedOver is closed once the client's session exists on the
	// browser, or the browser is stopped.
	HandedOver() <-chan struct{}
}

// Filler starts ready browsers: the hub.
type Filler interface {
	// Fill starts one browser for k on a slot no request wants. It returns
	// an ErrNoSpare error, having started nothing, when no such slot is free
	// now or the engine that would run it is down: the pool tries again at
	// its next look, without backing off.
	Fill(ctx context.Context, id string, k Key) (Item, error)
	// Entries lists every configured entry with its fixed pool size (the
	// size a fixed-size pool keeps of it; 0 for none).
	Entries(size int) map[Key]int
}

// ErrNoSpare is Fill's answer when every slot is taken, a request waits, the
// start gate has no permit to spare, or the engine is down.
var ErrNoSpare = errors.New("no slot or start permit to spare")

// Result is how a request fared with the pool.
type Result string

// Results, the values of the claims metric's result label.
const (
	// Hit: the request's capabilities are those a ready browser was started
	// with; it gets the browser and its session at once.
	Hit Result = "hit"
	// Near: the same container, other browser options; the ready browser's
	// session is replaced by the client's own on the same fresh browser.
	Near Result = "near"
	// Miss: no ready browser fits; the request starts a browser cold.
	Miss Result = "miss"
)

// Reasons a ready browser is thrown away, the values of the discarded
// metric's reason label.
const (
	ReasonDead    = "dead"    // it stopped answering, or exited, while it waited
	ReasonAged    = "aged"    // older than -warm-pool-max-age
	ReasonEvicted = "evicted" // a request needed its slot
	ReasonSurplus = "surplus" // more were ready than the pool's size (it shrank, or the entry changed)
	ReasonClosed  = "closed"  // the hub is shutting down
)

// Defaults for zero Options fields.
const (
	DefaultMaxAge   = 10 * time.Minute
	DefaultInterval = time.Second
	DefaultWindow   = time.Minute
	// DefaultColdStart stands in for a key's start time until one is measured.
	DefaultColdStart = 3 * time.Second
	// DefaultMaxFilling bounds the fills under way at once, whatever the
	// sizes: fills compete with the host's other work and come last.
	DefaultMaxFilling = 2
	// missShare is the share of requests an adaptive pool may leave without
	// a ready browser for want of refills: its size is the refills under
	// way that are exceeded that rarely (baseStock).
	missShare = 0.01
	// minRetry is the first wait before a fill refused for want of a slot
	// or a start permit is tried again; it doubles up to the Interval. The
	// slot a session's teardown holds, or a client's start permit, is free
	// again within milliseconds to a start's time, and a pool short of a
	// browser misses every request meanwhile.
	minRetry = 100 * time.Millisecond
	// aliveTimeout bounds the check a ready browser passes before hand-over.
	aliveTimeout = 2 * time.Second
	// maxArrivals bounds what a key remembers of its arrivals.
	maxArrivals = 4096
)

// Options configure a Pool. The zero value is a pool that is off.
type Options struct {
	// Size is -warm-pool N: keep up to Size ready browsers of each browser's
	// default version (and an entry's own "warm" size where it sets one).
	Size int
	// Adaptive is -warm-pool adaptive: size each key's pool from the arrival
	// rate of matching requests times the measured start time (Little's law),
	// so that the refills under way rarely outnumber the ready browsers
	// (baseStock); 0 when nothing arrived within Window.
	Adaptive bool
	// MaxAge is -warm-pool-max-age: a ready browser older than this is
	// replaced. Zero: DefaultMaxAge.
	MaxAge time.Duration
	// Interval is how often sizes, deaths and ages are looked at (and after
	// every claim). Zero: DefaultInterval.
	Interval time.Duration
	// Window is how far back adaptive sizing counts arrivals. Zero:
	// DefaultWindow.
	Window time.Duration
	// MaxFilling bounds fills under way at once. Zero: DefaultMaxFilling.
	MaxFilling int
}

// On reports whether the options keep any pool at all.
func (o Options) On() bool { return o.Adaptive || o.Size > 0 }

// ParseMode reads -warm-pool's value: "off", "adaptive" or a count.
func ParseMode(s string) (size int, adaptive bool, err error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off", "0":
		return 0, false, nil
	case "adaptive":
		return 0, true, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1000 {
		return 0, false, fmt.Errorf("-warm-pool must be off, adaptive, or a count of ready browsers per browser from 1 to 1000 (got %q)", s)
	}
	return n, false, nil
}

func (o Options) withDefaults() Options {
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MaxFilling <= 0 {
		o.MaxFilling = DefaultMaxFilling
	}
	return o
}

type ready struct {
	item Item
	born time.Time
}

// stock is one key's pool.
type stock struct {
	ready   []ready // oldest first
	filling int
	// handing are near-claimed browsers whose client's session is not
	// created yet: their refills wait (HandOver).
	handing   int
	arrivals  []time.Time // oldest first, within Window
	coldStart time.Duration
	failures  int
	retryAt   time.Time
}

// Pool keeps ready browsers.
type Pool struct {
	opts   Options
	log    *slog.Logger
	filler Filler
	m      *metrics

	mu      sync.Mutex
	started bool
	closed  bool
	stocks  map[Key]*stock
	filling map[*fill]struct{}
	fillIDs uint64

	// retry is the wait before the next look after a fill found no spare
	// slot or permit (minRetry, doubling up to Interval); 0 while fills get
	// them.
	retry        time.Duration
	retryTime    *time.Timer
	retryPending bool

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

type fill struct {
	key    Key
	cancel context.CancelFunc
}

// New returns a pool; Start begins its fills, Close stops it. A pool whose
// options are off never starts a browser, and every Claim is a miss. A nil
// logger discards; a nil registerer registers nothing.
func New(opts Options, filler Filler, logger *slog.Logger, reg prometheus.Registerer) (*Pool, error) {
	if opts.Size < 0 || opts.MaxAge < 0 {
		return nil, fmt.Errorf("-warm-pool must be off, adaptive or a positive count, and -warm-pool-max-age a positive duration (got %d, %v)", opts.Size, opts.MaxAge)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{opts: opts.withDefaults(), log: logger, filler: filler, stocks: map[Key]*stock{}, filling: map[*fill]struct{}{},
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	var err error
	if p.m, err = newMetrics(p, reg); err != nil {
		return nil, err
	}
	if !opts.On() {
		close(p.done)
	}
	return p, nil
}

// Start begins the pool's fills, once: the caller starts browsers only
// when the process is ready to run them (an earlier run's leftovers swept,
// its signals set up: a driver forked before then inherits what the
// process ignored). Without Start, a pool holds nothing.
func (p *Pool) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.opts.On() || p.started || p.closed {
		return
	}
	p.started = true
	p.wg.Add(1)
	go p.loop()
}

// Kick asks the pool to look at its sizes now rather than at the next tick.
func (p *Pool) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Pool) loop() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	p.tend()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		case <-p.kick:
		}
		p.tend()
	}
}

func (p *Pool) stockLocked(k Key) *stock {
	s := p.stocks[k]
	if s == nil {
		s = &stock{}
		p.stocks[k] = s
	}
	return s
}

// target is how many ready browsers k's pool should hold now.
func (p *Pool) targetLocked(k Key, s *stock, fixed int, now time.Time) int {
	if !p.opts.Adaptive {
		return fixed
	}
	s.arrivals = trimBefore(s.arrivals, now.Add(-p.opts.Window))
	if len(s.arrivals) == 0 {
		return 0
	}
	rate := float64(len(s.arrivals)) / p.opts.Window.Seconds()
	start := s.coldStart
	if start == 0 {
		start = DefaultColdStart
	}
	return baseStock(rate*start.Seconds(), missShare)
}

// baseStock is how many ready browsers a pool must hold so that a request
// finds none at most a miss share of the time, when each claim starts a
// refill at once and refills run side by side. The refills under way then
// number as many as requests arrive during one start: on average the rate
// times the start time (Little's law), and, requests arriving at random, a
// Poisson number of that mean. A request misses when they are at least the
// pool's size, so the size is the least n with P(refills ≥ n) ≤ miss; one at
// least, so that a lone request finds one.
//
// Doubling the mean and adding one, as the pool did first, holds 3 at a
// mean of 0.8 (0.4 requests a second, 2 s starts): 5 % of requests then
// miss from refills alone, before any slot is short. This holds 4 (1 %).
// At high rates it holds fewer than that rule: the spread of a Poisson
// number grows as its square root, not as its mean.
func baseStock(mean, miss float64) int {
	if mean <= 0 {
		return 1
	}
	if mean > 100 {
		// The normal approximation, where e^-mean underflows; z is the
		// normal's 99th percentile, the default miss share's.
		return int(math.Ceil(mean+2.33*math.Sqrt(mean))) + 1
	}
	p := math.Exp(-mean) // P(refills = n)
	cdf := p             // P(refills ≤ n-1) once n counts from 1
	n := 1
	for 1-cdf > miss {
		p *= mean / float64(n)
		cdf += p
		n++
	}
	return n
}

func trimBefore(ts []time.Time, cut time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(cut) {
		i++
	}
	return ts[i:]
}

// tend discards what must go and starts the fills the sizes call for.
func (p *Pool) tend() {
	entries := p.filler.Entries(p.opts.Size)
	now := time.Now()
	type drop struct {
		k      Key
		item   Item
		reason string
	}
	var drops []drop
	var starts []*fill
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	for k := range entries {
		p.stockLocked(k)
	}
	keys := make([]Key, 0, len(p.stocks))
	for k := range p.stocks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range keys {
		s := p.stocks[k]
		fixed, configured := entries[k]
		target := 0
		if configured {
			target = p.targetLocked(k, s, fixed, now)
		}
		kept := s.ready[:0]
		for _, r := range s.ready {
			reason := ""
			switch {
			case exited(r.item):
				reason = ReasonDead
			case now.Sub(r.born) >= p.opts.MaxAge:
				reason = ReasonAged
			case !configured || r.item.Stale():
				reason = ReasonSurplus
			}
			if reason != "" {
				drops = append(drops, drop{k, r.item, reason})
				continue
			}
			kept = append(kept, r)
		}
		s.ready = kept
		for len(s.ready) > target && p.surplusLocked(s.ready[0], target, now) {
			drops = append(drops, drop{k, s.ready[0].item, ReasonSurplus})
			s.ready = s.ready[1:]
		}
		if !configured && len(s.ready) == 0 && s.filling == 0 && s.handing == 0 && len(s.arrivals) == 0 {
			delete(p.stocks, k)
			continue
		}
		for len(s.ready)+s.filling+s.handing < target && len(p.filling) < p.opts.MaxFilling && !now.Before(s.retryAt) {
			f := &fill{key: k}
			p.filling[f] = struct{}{}
			s.filling++
			starts = append(starts, f)
		}
	}
	p.mu.Unlock()
	for _, d := range drops {
		p.discard("", d.k, d.item, d.reason)
	}
	for _, f := range starts {
		p.start(f)
	}
}

// surplusLocked reports whether r, the oldest of more ready browsers than
// the target, is thrown away. An adaptive pool's target follows the last
// minute's arrivals and dips by one or two as they come and go: a browser
// thrown away at a dip is a start wasted, and the next claims would have
// used it (they take the oldest first, and start no refill while the pool
// holds more than it aims for). So while requests still arrive, one goes
// only once it has waited a whole Window unclaimed; a fixed size is the
// operator's bound, and an empty target means nothing arrives: those go at
// once.
func (p *Pool) surplusLocked(r ready, target int, now time.Time) bool {
	return !p.opts.Adaptive || target == 0 || now.Sub(r.born) >= p.opts.Window
}

func exited(it Item) bool {
	select {
	case <-it.Exited():
		return true
	default:
		return false
	}
}

func (p *Pool) start(f *fill) {
	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	f.cancel = cancel
	p.fillIDs++
	id := "pool-" + strconv.FormatUint(p.fillIDs, 10)
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer cancel()
		t0 := time.Now()
		item, err := p.filler.Fill(ctx, id, f.key)
		took := time.Since(t0)
		p.mu.Lock()
		delete(p.filling, f)
		s := p.stockLocked(f.key)
		s.filling--
		switch {
		case err == nil && p.closed:
			p.mu.Unlock()
			p.discard(id, f.key, item, ReasonClosed)
			return
		case err == nil:
			s.ready = append(s.ready, ready{item: item, born: time.Now()})
			s.failures, s.retryAt = 0, time.Time{}
			s.coldStart = ewma(s.coldStart, took)
			p.retry = 0
			p.mu.Unlock()
			logtag.Event(p.log, slog.LevelInfo, id, "POOL_FILL", logtag.Browser(f.key.String()), logtag.Duration(fmt.Sprintf("%.3fs", took.Seconds()), took))
			p.m.fills.WithLabelValues("ready").Inc()
			// Its place among the fills under way (and its start permit) is
			// free: the next fill may start now, not at the next tick. Only
			// after a browser got ready: a fill refused for want of a slot
			// would otherwise retry without pause.
			p.Kick()
			return
		case errors.Is(err, ErrNoSpare):
			p.retryLocked()
			p.mu.Unlock()
			return
		case ctx.Err() != nil:
			p.mu.Unlock()
			return
		}
		// A failing entry (a missing image, a broken driver) is tried again
		// later and later, so the pool does not start it in a loop.
		s.failures++
		backoff := min(5*time.Second<<min(s.failures-1, 6), 5*time.Minute)
		s.retryAt = time.Now().Add(backoff)
		p.mu.Unlock()
		p.m.fills.WithLabelValues("failed").Inc()
		logtag.Event(p.log, slog.LevelWarn, id, "POOL_FILL_FAILED", logtag.Browser(f.key.String()), err, fmt.Sprintf("next try in %v", backoff))
	}()
}

// retryLocked schedules the next look after a fill found no spare slot or
// start permit: soon (minRetry), since what held it up — a session's
// teardown, a client's start — ends within a start's time, then less and
// less often while none is found, down to the Interval's looks. A look
// that finds a slot starts the fills the pool is short of, and each fill
// that gets its browser ready resets the wait.
func (p *Pool) retryLocked() {
	if p.closed || p.retryPending {
		return // one look is enough for every fill refused meanwhile
	}
	p.retry = min(max(2*p.retry, minRetry), p.opts.Interval)
	p.retryPending = true
	if p.retryTime == nil {
		p.retryTime = time.AfterFunc(p.retry, p.retryNow)
		return
	}
	p.retryTime.Reset(p.retry)
}

func (p *Pool) retryNow() {
	p.mu.Lock()
	p.retryPending = false
	p.mu.Unlock()
	p.Kick()
}

func ewma(old, sample time.Duration) time.Duration {
	if old == 0 {
		return sample
	}
	return old + (sample-old)/4
}

func (p *Pool) discard(id string, k Key, it Item, reason string) {
	it.Discard()
	p.m.discarded.WithLabelValues(reason).Inc()
	logtag.Event(p.log, slog.LevelInfo, id, "POOL_DISCARD", logtag.Browser(k.String()), logtag.Reason(reason, true))
}

// Claim hands a ready browser of k to request id when classify says it
// fits (Hit or Near), checking first that it is alive; a dead one is
// discarded and the next tried. With none that fits it returns nil and
// Miss. Each call counts as an arrival for k's adaptive size: call it for
// requests whose container the pool could have started, and Missed for
// the rest.
func (p *Pool) Claim(ctx context.Context, id string, k Key, classify func(Item) Result) (Item, Result) {
	if !p.opts.On() {
		return nil, Miss
	}
	kick := true
	defer func() {
		if kick {
			p.Kick()
		}
	}()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, Miss
	}
	s := p.stockLocked(k)
	if p.opts.Adaptive {
		if len(s.arrivals) >= maxArrivals {
			s.arrivals = s.arrivals[1:]
		}
		s.arrivals = append(s.arrivals, time.Now())
	}
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if len(s.ready) == 0 {
			p.mu.Unlock()
			p.Missed(id, k)
			return nil, Miss
		}
		r := s.ready[0]
		s.ready = s.ready[1:]
		p.mu.Unlock()
		// The check runs to its end if the client leaves meanwhile: cut
		// off, it would tell a good browser from a dead one no more.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), aliveTimeout)
		alive := !exited(r.item) && r.item.Alive(actx)
		cancel()
		if ctx.Err() != nil {
			// The client left during the check: the browser goes back
			// untouched, if it is still good.
			p.giveBack(k, r, alive)
			return nil, Miss
		}
		if !alive {
			p.discard(id, k, r.item, ReasonDead)
			continue
		}
		res := classify(r.item)
		if res == Miss {
			p.giveBack(k, r, true)
			p.Missed(id, k)
			return nil, Miss
		}
		p.m.claims.WithLabelValues(string(res)).Inc()
		logtag.Event(p.log, slog.LevelInfo, id, "POOL_CLAIM", logtag.Browser(k.String()), string(res), "ready for "+time.Since(r.born).Round(time.Millisecond).String())
		if h, ok := r.item.(HandOver); ok && res == Near {
			kick = !p.awaitHandOver(k, r.item, h.HandedOver())
		}
		return r.item, res
	}
}

// awaitHandOver holds back the refill of a near-claimed browser until its
// client's session exists (handed closes), the browser ends, or a Window
// passes, whichever comes first; it reports false, holding nothing back,
// once the pool is closed.
func (p *Pool) awaitHandOver(k Key, it Item, handed <-chan struct{}) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.stockLocked(k).handing++
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(p.opts.Window)
		defer t.Stop()
		select {
		case <-handed:
		case <-it.Exited():
		case <-p.done:
		case <-t.C:
		}
		p.mu.Lock()
		p.stockLocked(k).handing--
		p.mu.Unlock()
		p.Kick()
	}()
	return true
}

func (p *Pool) giveBack(k Key, r ready, alive bool) {
	if !alive {
		p.discard("", k, r.item, ReasonDead)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.discard("", k, r.item, ReasonClosed)
		return
	}
	s := p.stockLocked(k)
	s.ready = append([]ready{r}, s.ready...)
	p.mu.Unlock()
}

// Missed counts a request the pool could not serve.
func (p *Pool) Missed(id string, k Key) {
	if !p.opts.On() {
		return
	}
	p.m.claims.WithLabelValues(string(Miss)).Inc()
	logtag.Event(p.log, slog.LevelDebug, id, "POOL_MISS", logtag.Browser(k.String()))
}

// ObserveStart tells the pool how long a cold start of k took, for adaptive
// sizing.
func (p *Pool) ObserveStart(k Key, took time.Duration) {
	if !p.opts.Adaptive {
		return
	}
	p.mu.Lock()
	s := p.stockLocked(k)
	s.coldStart = ewma(s.coldStart, took)
	p.mu.Unlock()
}

// Evict frees a slot for a client's request: it discards a ready browser
// (of the key with the most ready, the oldest), or else cancels a fill
// under way. It reports whether it found anything to free.
func (p *Pool) Evict(id string) bool {
	if !p.opts.On() {
		return false
	}
	p.mu.Lock()
	var (
		best Key
		bs   *stock
	)
	for k, s := range p.stocks {
		if len(s.ready) > 0 && (bs == nil || len(s.ready) > len(bs.ready)) {
			best, bs = k, s
		}
	}
	if bs != nil {
		r := bs.ready[0]
		bs.ready = bs.ready[1:]
		p.mu.Unlock()
		p.discard(id, best, r.item, ReasonEvicted)
		return true
	}
	for f := range p.filling {
		if f.cancel != nil {
			delete(p.filling, f) // counted in its stock until the fill returns
			p.mu.Unlock()
			f.cancel()
			logtag.Event(p.log, slog.LevelInfo, id, "POOL_FILL_CANCELLED", logtag.Browser(f.key.String()), logtag.Reason("a request needs its slot", false))
			return true
		}
	}
	p.mu.Unlock()
	return false
}

// Close discards every ready browser, cancels every fill and stops the loop;
// it returns once no fill is under way. Later claims are misses.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var drops []ready
	var keys []Key
	for k, s := range p.stocks {
		for _, r := range s.ready {
			drops = append(drops, r)
			keys = append(keys, k)
		}
		s.ready = nil
	}
	for f := range p.filling {
		if f.cancel != nil {
			f.cancel()
		}
	}
	if p.opts.On() {
		close(p.done)
	}
	if p.retryTime != nil {
		p.retryTime.Stop()
	}
	p.mu.Unlock()
	for i, r := range drops {
		p.discard("", keys[i], r.item, ReasonClosed)
	}
	p.wg.Wait()
}

// KeyStats is one key's pool now.
type KeyStats struct {
	Browser string `json:"browser"`
	Version string `json:"version"`
	// Ready browsers wait for a client; Filling are starting.
	Ready   int `json:"ready"`
	Filling int `json:"filling"`
	// Target is the size the pool aims for now.
	Target int `json:"target"`
}

// Stats lists every key's pool, sorted by key; nil while the pool is off.
func (p *Pool) Stats() []KeyStats {
	if !p.opts.On() {
		return nil
	}
	entries := p.filler.Entries(p.opts.Size)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []KeyStats{}
	for k, s := range p.stocks {
		fixed, ok := entries[k]
		target := 0
		if ok {
			target = p.targetLocked(k, s, fixed, now)
		}
		if target == 0 && len(s.ready) == 0 && s.filling == 0 {
			continue
		}
		out = append(out, KeyStats{Browser: k.Browser, Version: k.Version, Ready: len(s.ready), Filling: s.filling, Target: target})
	}
	slices.SortFunc(out, func(a, b KeyStats) int {
		return strings.Compare(a.Browser+" "+a.Version, b.Browser+" "+b.Version)
	})
	return out
}

type metrics struct {
	claims    *prometheus.CounterVec
	discarded *prometheus.CounterVec
	fills     *prometheus.CounterVec
}

// newMetrics registers the pool's collectors; ready is read from the pool at
// scrape time, so it cannot drift from it.
func newMetrics(p *Pool, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "websummoner_pool_claims_total",
			Help: "New-session requests by how the warm pool served them: hit (a ready browser's session handed over), near (a ready browser, the client's own session created on it), miss (a cold start).",
		}, []string{"result"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "websummoner_pool_discarded_total",
			Help: "Ready browsers thrown away unused, by reason: dead, aged (-warm-pool-max-age), evicted (a request needed the slot), surplus (the pool shrank or browsers.json changed), closed (shutdown).",
		}, []string{"reason"}),
		fills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "websummoner_pool_fills_total",
			Help: "Warm-pool browser starts, by result: ready, failed.",
		}, []string{"result"}),
	}
	if p.opts.On() {
		for _, r := range []Result{Hit, Near, Miss} {
			m.claims.WithLabelValues(string(r))
		}
		for _, r := range []string{ReasonDead, ReasonAged, ReasonEvicted, ReasonSurplus, ReasonClosed} {
			m.discarded.WithLabelValues(r)
		}
	}
	if err := wsmetrics.Register(reg, m.claims, m.discarded, m.fills, &readyCollector{p}); err != nil {
		return nil, err
	}
	return m, nil
}

var readyDesc = prometheus.NewDesc("websummoner_pool_ready",
	"Ready browsers waiting in the warm pool, by browsers.json entry.", []string{"browser", "version"}, nil)

type readyCollector struct{ p *Pool }

func (c *readyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- readyDesc }

func (c *readyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.p.Stats() {
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, float64(s.Ready), s.Browser, s.Version)
	}
}
