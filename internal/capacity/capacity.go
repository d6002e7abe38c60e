// Package capacity is the start gate: it limits how many browsers may be starting
// at once, and drives that limit from a live signal — start outcomes, start
// latency against a slowly moving baseline, and the engine's health — instead of
// a fixed number. The queue consults it when it admits: a waiter is admitted when
// a slot is free AND the gate permits a start. See docs/capacity.md.
package capacity

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/logtag"
	wsmetrics "github.com/websummoner/websummoner/internal/metrics"
	"github.com/websummoner/websummoner/internal/queue"
)

// Mode says how the gate's limit is set.
type Mode int

// Modes of the gate.
const (
	// Adaptive drives the limit from the start signal (the default).
	Adaptive Mode = iota
	// Fixed pins the limit at Options.Fixed.
	Fixed
	// Off lets every admitted request start at once, as Selenoid does.
	Off
)

func (m Mode) String() string {
	return [...]string{"adaptive", "fixed", "off"}[m]
}

// Options configure the gate.
type Options struct {
	// Limit is -limit, the ceiling. Zero: queue.DefaultLimit.
	Limit int
	// Mode is adaptive, fixed or off.
	Mode Mode
	// Fixed is the pinned limit in Fixed mode (1 … Limit).
	Fixed int
	// Initial is the adaptive limit at start-up; zero means min(Limit, 2). It
	// doubles each healthy window until the first failure, so a healthy host
	// reaches -limit within about log2(Limit) windows.
	Initial int
	// MinWindow and MaxWindow bound the latency window, which otherwise follows the
	// baseline start latency; zero means 500ms and 30s.
	MinWindow, MaxWindow time.Duration
	// SlowFactor: a successful start slower than SlowFactor × baseline is a
	// congestion signal; zero means 3.
	SlowFactor float64
}

// Gate is the start gate. It implements queue.Gate and queue.SpareGate.
type Gate struct {
	opts     Options
	log      *slog.Logger
	onChange func()

	mu       sync.Mutex
	limit    int
	ssthresh int // below it the limit doubles per healthy window; above, it probes
	step     int // the next probe's increase above ssthresh
	hold     int // healthy windows still to wait before probing
	// failedProbes counts cuts since capacity last proved higher than ssthresh.
	failedProbes int
	probeSeen    bool // one healthy window seen at the probed limit
	inFlight     int
	healthy      bool
	// baselines: per kind of start (a browsers.json entry), the EWMA of its
	// successful start latencies, absent until its first; one browser's
	// normal start may be many times another's, and a shared baseline took
	// the slower one's for congestion and held the gate at 1.
	baselines map[string]kindBaseline
	latest    time.Duration // the baseline of the kind last started, for Stats

	// the current latency window
	winStart time.Time
	winOK    int
	winFail  int
	winSlow  int
	winUsed  bool // in-flight reached the limit during the window
	lastCut  time.Time

	m *metrics
}

var _ queue.SpareGate = (*Gate)(nil)

// Validate says which flag holds a value the gate cannot work with.
func (o Options) Validate() error {
	if o.Limit < 1 || o.Limit > queue.MaxLimit {
		return fmt.Errorf("-limit must be a whole number from 1 to %d (got %d)", queue.MaxLimit, o.Limit)
	}
	if o.Mode == Fixed && (o.Fixed < 1 || o.Fixed > o.Limit) {
		return fmt.Errorf("-start-gate must be \"adaptive\", \"off\" or a number from 1 to -limit %d (got %d)", o.Limit, o.Fixed)
	}
	return nil
}

// ModeFlag binds -start-gate to an Options' Mode and Fixed: "adaptive", "off"
// or a number (its range against -limit is Validate's).
type ModeFlag struct{ O *Options }

// String is the flag's current value.
func (f ModeFlag) String() string {
	if f.O == nil {
		return Adaptive.String()
	}
	if f.O.Mode == Fixed {
		return strconv.Itoa(f.O.Fixed)
	}
	return f.O.Mode.String()
}

// Set reads "adaptive", "off" or a number.
func (f ModeFlag) Set(s string) error {
	switch s {
	case "adaptive":
		f.O.Mode = Adaptive
	case "off":
		f.O.Mode = Off
	default:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("must be \"adaptive\", \"off\" or a number from 1 to -limit")
		}
		f.O.Mode, f.O.Fixed = Fixed, n
	}
	return nil
}

// New returns a gate; reg may be nil.
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Gate, error) {
	if opts.Limit == 0 {
		opts.Limit = queue.DefaultLimit
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Initial <= 0 {
		opts.Initial = min(opts.Limit, 2)
	}
	opts.Initial = min(opts.Initial, opts.Limit)
	if opts.MinWindow <= 0 {
		opts.MinWindow = 500 * time.Millisecond
	}
	if opts.MaxWindow <= 0 {
		opts.MaxWindow = 30 * time.Second
	}
	if opts.SlowFactor <= 0 {
		opts.SlowFactor = 3
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Gate{opts: opts, log: logger, healthy: true, ssthresh: opts.Limit, step: 1, winStart: time.Now(), baselines: map[string]kindBaseline{}}
	switch opts.Mode {
	case Adaptive:
		g.limit = opts.Initial
	case Fixed:
		g.limit = opts.Fixed
	case Off:
		g.limit = opts.Limit
	}
	var err error
	if g.m, err = newMetrics(g, reg); err != nil {
		return nil, err
	}
	return g, nil
}

// Notify sets the function called, outside the gate's lock, whenever a start may
// newly be permitted (the queue's Kick).
func (g *Gate) Notify(f func()) {
	g.mu.Lock()
	g.onChange = f
	g.mu.Unlock()
}

// permitsLocked says whether a start of cost containers fits: within the limit,
// or alone (a start that costs more than the limit would otherwise never run).
func (g *Gate) permitsLocked(cost int) bool {
	if !g.healthy && g.opts.Mode == Adaptive {
		return false
	}
	return g.inFlight == 0 || g.inFlight+cost <= g.limit
}

// CanStart reports whether a start of that cost would be permitted now,
// reserving nothing.
func (g *Gate) CanStart(cost int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.permitsLocked(max(cost, 1))
}

// TryStart reserves a start of cost containers (a browser and its video
// recorder are 2) if the gate permits it.
func (g *Gate) TryStart(cost int) bool {
	cost = max(cost, 1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.permitsLocked(cost) {
		return false
	}
	g.inFlight += cost
	if g.inFlight >= g.limit {
		g.winUsed = true
	}
	return true
}

// TrySpare reserves a start of cost containers for a warm-pool fill, the
// lowest-priority start: only if a client's start (of cost 1) would still be
// permitted beside it. FinishStart ends it as it ends any start.
//
// The permit a fill leaves to clients counts as taken when the gate judges
// whether it was full: a gate grows only after a window in which it was, and
// fills, which never take its last permit, would otherwise never fill it. A
// gate at its initial limit of 2 would then run one fill at a time, and none
// while a client's browser starts, however healthy the host.
func (g *Gate) TrySpare(cost int) bool {
	cost = max(cost, 1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.permitsLocked(cost + 1) {
		return false
	}
	g.inFlight += cost
	if g.inFlight+1 >= g.limit {
		g.winUsed = true
	}
	return true
}

// FinishStart ends a start reserved by TryStart(cost) or TrySpare(cost) with
// its outcome and latency; kind (queue.Request.Kind) is what it started,
// judged slow against that kind's baseline only.
func (g *Gate) FinishStart(cost int, kind string, o queue.StartOutcome, latency time.Duration) {
	g.mu.Lock()
	g.inFlight -= max(cost, 1)
	now := time.Now()
	g.m.outcomes.WithLabelValues(o.String()).Inc()
	var change string
	if g.opts.Mode == Adaptive {
		change = g.observeLocked(now, kind, o, latency)
	}
	notify := g.onChange
	g.mu.Unlock()
	if change != "" {
		logtag.Event(g.log, slog.LevelInfo, "", "GATE_LIMIT", change)
	}
	if notify != nil {
		notify()
	}
}

// window is the latency window: about one baseline start, within bounds.
// With several kinds of start, one start of the slowest of those started
// lately: a browser started once long ago does not hold every window at its
// length.
func (g *Gate) windowLocked(now time.Time) time.Duration {
	var slowest time.Duration
	for _, b := range g.baselines {
		if now.Sub(b.at) <= kindRecent*g.opts.MaxWindow {
			slowest = max(slowest, b.d)
		}
	}
	return min(max(slowest, g.opts.MinWindow), g.opts.MaxWindow)
}

// kindBaseline is one kind's baseline and when a start of it last ended.
type kindBaseline struct {
	d  time.Duration
	at time.Time
}

// kindRecent is how many of the longest windows a kind's baseline weighs in
// the window after its last start.
const kindRecent = 4

// maxKinds bounds the baselines kept: one per browsers.json entry started,
// which reloads can change; past it, the kind's start has no baseline yet.
const maxKinds = 1024

// observeLocked applies the control law to one outcome and returns a description
// of any limit change. The law (docs/capacity.md):
//   - a failure, or a success slower than SlowFactor × baseline, cuts once per
//     window: the concurrency c at which it happened is remembered (ssthresh =
//     c-1) and the limit halves (c/2);
//   - a healthy window (successes, no failure, nothing slow) in which the gate was
//     full grows the limit: doubling up to ssthresh; there it holds for
//     holdWindows, then probes above it by 1, 2, 4… per window;
//   - a window in which the gate was not full changes nothing, so the limit never
//     drifts upward while idle.
func (g *Gate) observeLocked(now time.Time, kind string, o queue.StartOutcome, latency time.Duration) string {
	switch o {
	case queue.StartIgnored:
		return ""
	case queue.StartFailed:
		g.winFail++
		if g.mayCutLocked(now, latency) {
			return g.cutLocked(now, "start failed")
		}
		return ""
	}
	kb, known := g.baselines[kind]
	baseline := kb.d
	slow := known && float64(latency) > g.opts.SlowFactor*float64(baseline)
	// The baseline moves slowly (1/8 per sample) towards successes that say what
	// the host can do: any not far above it, and any start that ran alone, slow
	// or not. So a lasting shift (a cold image, a slower host) becomes the new
	// normal once the gate has backed off to single starts, while starts slowed
	// by contention do not drag the baseline up and hide the overload.
	alone := g.inFlight == 0
	switch {
	case !known && len(g.baselines) >= maxKinds:
		clear(g.baselines)
		fallthrough
	case !known:
		baseline = latency
	case alone || latency <= 2*baseline:
		baseline += (latency - baseline) / 8
	}
	g.baselines[kind], g.latest = kindBaseline{d: baseline, at: now}, baseline
	g.winOK++
	if slow {
		g.winSlow++
		if g.mayCutLocked(now, latency) {
			return g.cutLocked(now, fmt.Sprintf("start took %v, over %.0f× the baseline", latency.Round(time.Millisecond), g.opts.SlowFactor))
		}
		return ""
	}
	if now.Sub(g.winStart) < g.windowLocked(now) {
		return ""
	}
	// A window closed: grow if it was healthy and the gate was actually in use.
	healthy := g.winFail == 0 && g.winSlow == 0 && g.winOK > 0
	used := g.winUsed
	g.resetWindowLocked(now)
	if !healthy || !used || g.limit >= g.opts.Limit {
		return ""
	}
	from := g.limit
	switch {
	case g.limit < g.ssthresh:
		g.limit = min(2*g.limit, g.ssthresh, g.opts.Limit)
	case g.hold > 0:
		g.hold--
		return ""
	default:
		if g.limit > g.ssthresh {
			// A probe is judged over two windows: the first can close on quick
			// successes before the probe's slower failures arrive.
			if !g.probeSeen {
				g.probeSeen = true
				return ""
			}
			// The probe held: capacity is above the old ceiling.
			g.ssthresh, g.failedProbes = g.limit, 0
		}
		g.limit = min(g.limit+g.step, g.opts.Limit)
		g.step *= 2
		g.probeSeen = false
	}
	g.m.limit.Set(float64(g.limit))
	return fmt.Sprintf("%d → %d: a healthy window with the gate full", from, g.limit)
}

// mayCutLocked allows one cut per window, and none for a start that began before
// the last cut: it reports the overload that cut already answered.
func (g *Gate) mayCutLocked(now time.Time, latency time.Duration) bool {
	return now.Sub(g.lastCut) >= g.windowLocked(now) && !now.Add(-latency).Before(g.lastCut)
}

// holdWindows is how many healthy windows the gate stays just below a limit where
// it failed, before it probes above it again; it doubles with each probe that
// fails in a row (3, 6, 12, 24), so a host at a steady capacity sees a failed
// probe rarely, while one whose capacity came back is found within 24 windows.
func holdWindows(failedProbes int) int { return 3 << min(failedProbes, 3) }

func (g *Gate) cutLocked(now time.Time, why string) string {
	g.lastCut = now
	from := g.limit
	c := g.inFlight + 1 // the concurrency at which the start failed
	g.ssthresh = max(1, min(c, g.limit)-1)
	g.limit = max(1, min(c, g.limit)/2)
	g.step, g.hold = 1, holdWindows(g.failedProbes)
	g.failedProbes++
	g.resetWindowLocked(now)
	g.m.limit.Set(float64(g.limit))
	if from == g.limit {
		return ""
	}
	return fmt.Sprintf("%d → %d: %s", from, g.limit, why)
}

func (g *Gate) resetWindowLocked(now time.Time) {
	g.winStart, g.winOK, g.winFail, g.winSlow = now, 0, 0, 0
	g.winUsed = g.inFlight >= g.limit
}

// SetHealthy is the engine's health. While unhealthy no start is permitted; on
// recovery the gate is half-open: one probe start, and it ramps up from there.
func (g *Gate) SetHealthy(up bool) {
	g.mu.Lock()
	if g.healthy == up {
		g.mu.Unlock()
		return
	}
	g.healthy = up
	if g.opts.Mode != Adaptive {
		// A pinned gate is pinned: it does not follow the engine either.
		g.mu.Unlock()
		return
	}
	var change string
	if up {
		from := g.limit
		g.ssthresh = max(g.limit, 2) // ramp back quickly to where it was
		g.limit, g.step, g.hold, g.failedProbes = 1, 1, 0, 0
		g.resetWindowLocked(time.Now())
		g.m.limit.Set(1)
		change = fmt.Sprintf("%d → 1: engine back, probing (half-open)", from)
	}
	notify := g.onChange
	g.mu.Unlock()
	if up {
		logtag.Event(g.log, slog.LevelInfo, "", "GATE_OPEN", "engine answers again")
	} else {
		logtag.Event(g.log, slog.LevelWarn, "", "GATE_CLOSED", "engine unreachable: no starts until it answers")
	}
	if change != "" {
		logtag.Event(g.log, slog.LevelInfo, "", "GATE_LIMIT", change)
	}
	if up && notify != nil {
		notify()
	}
}

// Stats is the gate's state for /status.
type Stats struct {
	Mode     string  `json:"mode"`
	Limit    int     `json:"limit"`
	InFlight int     `json:"inFlight"`
	Baseline float64 `json:"baselineSeconds"`
	Healthy  bool    `json:"healthy"`
}

// Stats returns the gate's state now.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{Mode: g.opts.Mode.String(), Limit: g.limit, InFlight: g.inFlight, Baseline: g.latest.Seconds(), Healthy: g.healthy}
}

type metrics struct {
	limit    prometheus.Gauge
	outcomes *prometheus.CounterVec
}

func newMetrics(g *Gate, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		limit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "websummoner_gate_limit",
			Help: "Browser starts the gate permits at once now.",
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "websummoner_gate_start_outcomes_total",
			Help: "Browser starts through the gate, by outcome: success, failure (engine or deadline), ignored (client-caused or client gone).",
		}, []string{"outcome"}),
	}
	m.limit.Set(float64(g.limit))
	for _, o := range []queue.StartOutcome{queue.StartSucceeded, queue.StartFailed, queue.StartIgnored} {
		m.outcomes.WithLabelValues(o.String())
	}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "websummoner_gate_starts_in_flight",
		Help: "Browser starts under way.",
	}, func() float64 { return float64(g.Stats().InFlight) })
	baseline := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "websummoner_gate_baseline_seconds",
		Help: "The slowly moving baseline of successful start latency, of the browser started last (each browsers.json entry has its own).",
	}, func() float64 { return g.Stats().Baseline })
	if err := wsmetrics.Register(reg, m.limit, m.outcomes, inFlight, baseline); err != nil {
		return nil, err
	}
	return m, nil
}
