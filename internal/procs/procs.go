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
//
// Which of the two is cheaper while the load is low is the VM's, not the
// code's: on the VMs of 2026-12-01 one P cost the hub 92–110 µs a command at
// one session and two 161, on the second of 2026-12-02 one cost 124–151 and
// two 109–119, with the latency target missed on the dearer one each time.
// So with Tune the Governor measures it: now and then it runs its low-load
// commands in four windows, Low and High in turn, and keeps whichever used
// less of the process's CPU a command in both pairs, by a margin.
package procs

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
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

	// Tune lets the Governor find out whether Low or High Ps cost the hub
	// less CPU a command while the load is low, and use that one then (see
	// the package comment). Off, the Ps while the load is low are Low.
	Tune bool
	// TrialCommands is how many commands a trial window counts. Zero:
	// DefaultTrialCommands.
	TrialCommands int
	// TrialEvery is how many commands pass between the end of one trial and
	// the start of the next. Zero: DefaultTrialEvery.
	TrialEvery int
	// CPU is the CPU time the process has used so far. Nil: getrusage(2).
	CPU func() time.Duration
}

// Trial sizes. A window of 500 commands at one session lasts a quarter of a
// second and reads a CPU difference of 10–25% between the settings well
// above what a metrics scrape in it adds (about 2%); a trial every 50,000
// commands puts a thousand of them on the dearer setting, under 0.1% of the
// hub's CPU.
const (
	DefaultTrialCommands = 500
	DefaultTrialEvery    = 50000
	// trialMaxWindow voids a window that lasts longer: the commands came too
	// few for their cost to stand out from the hub's other work, and too few
	// for the setting to matter.
	trialMaxWindow = 5 * time.Second
	// trialMargin is how much cheaper the other setting must be, on the
	// average of its two windows, to be taken.
	trialMargin = 0.92
)

// Validate says what cannot work.
func (o Options) Validate() error {
	if o.Low < 1 {
		return fmt.Errorf("procs: Low must be at least 1 (got %d)", o.Low)
	}
	if o.Crowd < 0 || o.Window < 0 || o.TrialCommands < 0 || o.TrialEvery < 0 {
		return fmt.Errorf("procs: Crowd, Window, TrialCommands and TrialEvery must not be negative (got %d, %v, %d, %d)", o.Crowd, o.Window, o.TrialCommands, o.TrialEvery)
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

	// done counts ended commands; when it reaches next, a trial begins or
	// its window ends (step).
	done atomic.Int64
	next atomic.Int64

	mu      sync.Mutex // orders switches, the timer and the trial
	timer   *time.Timer
	stopped bool
	low     int // the Ps while the load is low: Low, or High once a trial found it cheaper
	cur     int // the Ps set now
	trial   trial

	procs    prometheus.Gauge
	lowPs    prometheus.Gauge
	switches prometheus.Counter
}

// trial is a run of four windows, the low-load setting and the other in
// turn (ABAB, so that a drift in the load or the machine weighs on both).
type trial struct {
	window int // the window under way, 0–3; -1: no trial
	void   bool
	n0     int64 // done, cpu0 and t0 at the window's start
	cpu0   time.Duration
	t0     time.Time
	cost   [4]time.Duration // CPU a command, each window
}

// New returns a Governor and sets the Ps to Low. Its metrics:
// websummoner_hub_procs (the Ps now), websummoner_hub_procs_low (the Ps while
// the load is low) and websummoner_hub_procs_raised_total
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
	if opts.TrialCommands == 0 {
		opts.TrialCommands = DefaultTrialCommands
	}
	if opts.TrialEvery == 0 {
		opts.TrialEvery = DefaultTrialEvery
	}
	if opts.CPU == nil {
		opts.CPU = processCPU
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Governor{opts: opts, log: logger, low: opts.Low, cur: opts.Low, trial: trial{window: -1},
		procs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "websummoner_hub_procs",
			Help: "CPUs the hub's own code runs on at once now (Go's GOMAXPROCS): -max-procs, or in its automatic mode a quarter of the CPUs, raised to all of them while many commands are in flight at once or drivers start."}),
		lowPs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "websummoner_hub_procs_low",
			Help: "CPUs the hub's own code runs on while few commands are in flight and no driver starts: in the automatic -max-procs mode, whichever of a quarter of the CPUs and all of them its last trial found cheaper a command."}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{Name: "websummoner_hub_procs_raised_total",
			Help: "Times the hub's automatic -max-procs raised its CPUs for a crowd of commands or a driver start."}),
	}
	if err := wsmetrics.Register(reg, g.procs, g.lowPs, g.switches); err != nil {
		return nil, err
	}
	opts.Set(opts.Low)
	g.procs.Set(float64(opts.Low))
	g.lowPs.Set(float64(opts.Low))
	// The first trial after a window's worth of commands: the first ones of a
	// hub are its start-up's.
	g.next.Store(int64(opts.TrialCommands))
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
	if !g.Adaptive() {
		return
	}
	g.inFlight.Add(-1)
	if g.opts.Tune {
		if n := g.done.Add(1); n >= g.next.Load() {
			g.step(n)
		}
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
	g.high.Store(false)
	g.trial.window = -1
	g.setLocked(g.low)
}

// setLocked sets the Ps to n unless they are n; g.mu is held.
func (g *Governor) setLocked(n int) {
	if g.cur != n {
		g.opts.Set(n)
		g.cur = n
	}
	g.procs.Set(float64(n))
}

// lowerLocked goes back to the low-load Ps; g.mu is held.
func (g *Governor) lowerLocked() {
	g.high.Store(false)
	g.setLocked(g.low) // a trial's window under way is void, and ends at its count
}

func (g *Governor) raise(why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.high.Load() || g.stopped {
		return
	}
	g.trial.void = true // a crowd or a start is not the low load a trial weighs
	if was := g.cur; was != g.opts.High {
		g.switches.Inc()
		logtag.Event(g.log, slog.LevelDebug, "", "PROCS", fmt.Sprintf("%d → %d", was, g.opts.High), why)
	}
	g.setLocked(g.opts.High)
	g.high.Store(true)
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
	logtag.Event(g.log, slog.LevelDebug, "", "PROCS", fmt.Sprintf("%d → %d", g.opts.High, g.cur),
		fmt.Sprintf("at most %d commands in flight and no driver start for %v", peak, g.opts.Window))
}

// trialPs is the Ps of a trial's window w: the low-load setting in the even
// windows, the other one in the odd.
func (g *Governor) trialPs(w int) int {
	if w%2 == 0 {
		return g.low
	}
	if g.low == g.opts.Low {
		return g.opts.High
	}
	return g.opts.Low
}

// step begins a trial, or ends a window of the one under way, at n commands
// ended.
func (g *Governor) step(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || n < g.next.Load() {
		return // another End took this step
	}
	t := &g.trial
	now, cpu := time.Now(), g.opts.CPU()
	if t.window < 0 {
		if g.high.Load() {
			g.next.Store(n + int64(g.opts.TrialCommands)) // a calmer moment, soon
			return
		}
		*t = trial{}
		g.beginWindow(n, cpu, now)
		return
	}
	if t.void || now.Sub(t.t0) > trialMaxWindow {
		logtag.Event(g.log, slog.LevelDebug, "", "PROCS_TRIAL", fmt.Sprintf("window %d of 4 void", t.window+1),
			fmt.Sprintf("a crowd or a driver start in it, or %d commands took over %v", n-t.n0, trialMaxWindow))
		t.window = -1
		if !g.high.Load() {
			g.setLocked(g.low)
		}
		g.next.Store(n + int64(g.opts.TrialEvery))
		return
	}
	t.cost[t.window] = (cpu - t.cpu0) / time.Duration(n-t.n0)
	if t.window++; t.window < 4 {
		g.beginWindow(n, cpu, now)
		return
	}
	t.window = -1
	g.next.Store(n + int64(g.opts.TrialEvery))
	a, b := t.cost[0]+t.cost[2], t.cost[1]+t.cost[3]
	was, other := g.low, g.trialPs(1)
	if t.cost[1] < t.cost[0] && t.cost[3] < t.cost[2] && float64(b) <= trialMargin*float64(a) {
		g.low = other
		g.lowPs.Set(float64(other))
		logtag.Event(g.log, slog.LevelInfo, "", "PROCS", fmt.Sprintf("%d Ps while the load is low, not %d", other, was),
			fmt.Sprintf("a command cost the hub %v of CPU on %d and %v on %d (two windows of %d commands each)", b/2, other, a/2, was, g.opts.TrialCommands))
	} else {
		logtag.Event(g.log, slog.LevelDebug, "", "PROCS_TRIAL", fmt.Sprintf("%d Ps while the load is low, kept", was),
			fmt.Sprintf("a command cost the hub %v of CPU on %d and %v on %d", a/2, was, b/2, other))
	}
	g.setLocked(g.low)
}

// beginWindow starts the trial's window g.trial.window at n commands ended,
// on its Ps; g.mu is held.
func (g *Governor) beginWindow(n int64, cpu time.Duration, now time.Time) {
	t := &g.trial
	t.void, t.n0, t.cpu0, t.t0 = false, n, cpu, now
	g.setLocked(g.trialPs(t.window))
	g.next.Store(n + int64(g.opts.TrialCommands))
}

// processCPU is the user and system CPU time of the whole process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
