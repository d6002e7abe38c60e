// Package procs sizes the hub's share of the CPUs (Go's GOMAXPROCS) to what
// it is doing at the moment.
//
// Why: a P (the Go scheduler's CPU slot) more than the work needs costs a
// thread's wake-up around every command when commands come one or a few at a
// time — on 2 CPUs, 1 session through the hub with 2 Ps: hub CPU 92–110 →
// 161 µs a command and the latency target missed — and on every VM of this
// project one P was best at 1 and 4 sessions. With work piling up it is the
// other way round: at 32 sessions the hub's one thread is one of dozens
// runnable on the machine, every session's commands wait on it, and with a
// second P (a second thread the kernel schedules) the 32-session ratio went
// 1.59 → 1.47 (three runs each, alternating); driver starts (a fork, an exec,
// a reap, each a thread's hand-off) gain the same way. No one number is right
// for both, so the Governor runs the hub on Low Ps and raises it to High while
// many commands are in flight at once or drivers are starting, and lowers it
// again after a Window without either (docs/benchmarks.md).
package procs

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/logtag"
	wsmetrics "github.com/websummoner/websummoner/internal/metrics"
)

// DefaultWindow is how long the load must stay low before the Governor lowers
// the hub's Ps again: long enough that a run of commands with pauses between
// them does not switch every few commands (a switch stops the world: 26 µs on
// the 2-CPU VM, BenchmarkSwitch), short enough that an idle hub soon gives the
// CPU back.
const DefaultWindow = 250 * time.Millisecond

// CrowdPerProc is how many commands in flight at once, per Low P, call for
// High: with a handful in flight the hub's one thread keeps up, a second one
// only wakes and sleeps (the 4-session runs).
const CrowdPerProc = 8

// Options configure a Governor.
type Options struct {
	// Low is the Ps the hub runs on while its load is low (at least 1).
	Low int
	// High is the Ps while it is high; at most Low (or zero) turns the
	// Governor off: the Ps stay Low.
	High int
	// Crowd is the commands in flight at once that call for High. Zero:
	// CrowdPerProc × Low.
	Crowd int
	// Window is how long without a crowd or a start the hub stays on High.
	// Zero: DefaultWindow.
	Window time.Duration
	// Set sets the Ps and returns the previous setting. Nil: runtime.GOMAXPROCS.
	Set func(int) int
}

// Validate says what cannot work.
func (o Options) Validate() error {
	if o.Low < 1 {
		return fmt.Errorf("procs: Low must be at least 1 (got %d)", o.Low)
	}
	if o.Crowd < 0 || o.Window < 0 {
		return fmt.Errorf("procs: Crowd and Window must not be negative (got %d, %v)", o.Crowd, o.Window)
	}
	return nil
}

// Governor raises and lowers the Ps. Its Begin, End, StartBegin and StartEnd
// are safe from any goroutine and cost a few atomic operations; a nil
// *Governor does nothing.
type Governor struct {
	opts Options
	log  *slog.Logger

	inFlight atomic.Int32 // commands between Begin and End
	peak     atomic.Int32 // the most in flight since the last look, kept while High
	starts   atomic.Int32 // driver starts between StartBegin and StartEnd
	started  atomic.Bool  // a start began since the last look
	high     atomic.Bool

	mu      sync.Mutex // orders switches and the timer
	timer   *time.Timer
	stopped bool

	procs    prometheus.Gauge
	switches prometheus.Counter
}

// New returns a Governor and sets the Ps to Low. Its metrics:
// websummoner_hub_procs (the Ps now) and websummoner_hub_procs_raised_total
// (times it went to High).
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Governor, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Crowd == 0 {
		opts.Crowd = CrowdPerProc * opts.Low
	}
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	if opts.Set == nil {
		opts.Set = runtime.GOMAXPROCS
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Governor{opts: opts, log: logger,
		procs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "websummoner_hub_procs",
			Help: "CPUs the hub's own code runs on at once now (Go's GOMAXPROCS): -max-procs, or in its automatic mode a quarter of the CPUs, raised to all of them while many commands are in flight at once or drivers start."}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{Name: "websummoner_hub_procs_raised_total",
			Help: "Times the hub's automatic -max-procs raised its CPUs for a crowd of commands or a driver start."}),
	}
	if err := wsmetrics.Register(reg, g.procs, g.switches); err != nil {
		return nil, err
	}
	opts.Set(opts.Low)
	g.procs.Set(float64(opts.Low))
	return g, nil
}

// Adaptive says whether the Governor switches at all (High above Low).
func (g *Governor) Adaptive() bool { return g != nil && g.opts.High > g.opts.Low }

// Begin is a command's start; End must follow.
func (g *Governor) Begin() {
	if !g.Adaptive() {
		return
	}
	n := g.inFlight.Add(1)
	if !g.high.Load() {
		// Only a window on High is looked at: raise starts its peak afresh.
		if n >= int32(g.opts.Crowd) {
			g.raise(fmt.Sprintf("%d commands in flight", n))
		}
		return
	}
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
}

// End is a command's end.
func (g *Governor) End() {
	if g.Adaptive() {
		g.inFlight.Add(-1)
	}
}

// StartBegin is a driver start's beginning; StartEnd must follow.
func (g *Governor) StartBegin() {
	if !g.Adaptive() {
		return
	}
	g.starts.Add(1)
	g.started.Store(true)
	if !g.high.Load() {
		g.raise("a driver starting")
	}
}

// StartEnd is a driver start's end, however it went.
func (g *Governor) StartEnd() {
	if g.Adaptive() {
		g.starts.Add(-1)
	}
}

// Stop sets the Ps back to Low and ends the Governor's timer; later calls
// change nothing.
func (g *Governor) Stop() {
	if !g.Adaptive() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	if g.timer != nil {
		g.timer.Stop()
	}
	if g.high.Load() {
		g.lowerLocked()
	}
}

// lowerLocked sets Low; g.mu is held.
func (g *Governor) lowerLocked() {
	g.opts.Set(g.opts.Low)
	g.high.Store(false)
	g.procs.Set(float64(g.opts.Low))
}

func (g *Governor) raise(why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.high.Load() || g.stopped {
		return
	}
	g.opts.Set(g.opts.High)
	g.high.Store(true)
	g.procs.Set(float64(g.opts.High))
	g.switches.Inc()
	logtag.Event(g.log, slog.LevelDebug, "", "PROCS", fmt.Sprintf("%d → %d", g.opts.Low, g.opts.High), why)
	// The peak and the start seen so far belong to the window now beginning.
	g.peak.Store(g.inFlight.Load())
	g.started.Store(false)
	if g.timer == nil {
		g.timer = time.AfterFunc(g.opts.Window, g.look)
	} else {
		g.timer.Reset(g.opts.Window)
	}
}

// look ends a window on High: another one if a start began in it or is still
// going, or if at least half a crowd was in flight at once (so that a load
// around the crowd does not switch at every window), else back to Low.
func (g *Governor) look() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || !g.high.Load() {
		return
	}
	peak := g.peak.Swap(g.inFlight.Load())
	if g.started.Swap(false) || g.starts.Load() > 0 || int(peak)*2 >= g.opts.Crowd {
		g.timer.Reset(g.opts.Window)
		return
	}
	g.lowerLocked()
	logtag.Event(g.log, slog.LevelDebug, "", "PROCS", fmt.Sprintf("%d → %d", g.opts.High, g.opts.Low),
		fmt.Sprintf("at most %d commands in flight and no driver start for %v", peak, g.opts.Window))
}
