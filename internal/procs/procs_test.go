package procs

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// setter records the Ps the Governor sets, as runtime.GOMAXPROCS would take
// them (the test process's own are left alone).
type setter struct {
	mu  sync.Mutex
	now int
	log []int
}

func (s *setter) set(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.now
	s.now = n
	s.log = append(s.log, n)
	return prev
}

func (s *setter) get() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func newGov(t *testing.T, o Options) (*Governor, *setter, *prometheus.Registry) {
	t.Helper()
	s := &setter{}
	o.Set = s.set
	reg := prometheus.NewRegistry()
	g, err := New(o, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	return g, s, reg
}

// A crowd of commands raises the Ps at once; once fewer than half a crowd
// were in flight for a whole window they go back down, and a load at half a
// crowd or more keeps them up window after window.
func TestCrowdRaisesAndQuietLowers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, reg := newGov(t, Options{Low: 1, High: 4, Crowd: 8, Window: 100 * time.Millisecond})
		if s.get() != 1 {
			t.Fatalf("Ps after New = %d, want Low 1", s.get())
		}
		for range 7 {
			g.Begin()
		}
		if s.get() != 1 {
			t.Fatalf("7 commands in flight (crowd 8) raised the Ps to %d", s.get())
		}
		g.Begin()
		if s.get() != 4 {
			t.Fatalf("8 commands in flight left the Ps at %d, want High 4", s.get())
		}
		if v := testutil.ToFloat64(g.procs); v != 4 {
			t.Errorf("websummoner_hub_procs = %v, want 4", v)
		}
		// Half a crowd in flight through the next windows: the Ps stay up.
		// (The steps below fall between the windows' ends, at 100 ms, 200 ms…)
		time.Sleep(50 * time.Millisecond)
		for range 4 {
			g.End()
		}
		for range 5 {
			time.Sleep(100 * time.Millisecond)
			if s.get() != 4 {
				t.Fatalf("4 commands in flight (half the crowd) lowered the Ps to %d", s.get())
			}
		}
		// Three in flight: the next window that saw no more than three lowers them.
		g.End()
		time.Sleep(100 * time.Millisecond) // the window then ending saw 4
		synctest.Wait()
		if s.get() != 4 {
			t.Fatalf("the window that saw 4 in flight lowered the Ps to %d", s.get())
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if s.get() != 1 {
			t.Fatalf("a window with at most 3 in flight left the Ps at %d, want Low 1", s.get())
		}
		if n, err := testutil.GatherAndCount(reg, "websummoner_hub_procs_raised_total"); err != nil || n != 1 {
			t.Fatalf("raised_total series: %d, %v", n, err)
		}
		if v := testutil.ToFloat64(g.switches); v != 1 {
			t.Errorf("websummoner_hub_procs_raised_total = %v, want 1", v)
		}
		for range 3 {
			g.End()
		}
		g.Stop()
		if got := fmt.Sprint(s.log); got != "[1 4 1]" {
			t.Errorf("Ps set %s, want [1 4 1]", got)
		}
	})
}

// A driver start raises the Ps for as long as it lasts and for one window
// after, however long it takes.
func TestStartKeepsThePsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, _ := newGov(t, Options{Low: 1, High: 2, Window: 100 * time.Millisecond})
		g.StartBegin()
		if s.get() != 2 {
			t.Fatalf("a start left the Ps at %d, want 2", s.get())
		}
		time.Sleep(2 * time.Second) // a start slower than twenty windows
		synctest.Wait()
		if s.get() != 2 {
			t.Fatalf("the Ps went down to %d during a start", s.get())
		}
		g.StartEnd()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if s.get() != 1 {
			t.Fatalf("a window after the start ended left the Ps at %d, want 1", s.get())
		}
		// A start that ends at once still raises the Ps for a window.
		g.StartBegin()
		g.StartEnd()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if s.get() != 1 {
			t.Fatalf("the window after a short start's own left the Ps at %d", s.get())
		}
		if got := fmt.Sprint(s.log); got != "[1 2 1 2 1]" { // New's Low, up, down, up, down
			t.Errorf("Ps set %s, want [1 2 1 2 1]", got)
		}
	})
}

// With High no more than Low — -max-procs or GOMAXPROCS set, or a machine of
// one CPU — the Governor sets Low once and never switches; a nil one does
// nothing at all.
func TestFixedNeverSwitches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, _ := newGov(t, Options{Low: 2, High: 2, Crowd: 1})
		for range 10 {
			g.Begin()
			g.StartBegin()
		}
		time.Sleep(time.Second)
		g.Stop()
		if len(s.log) != 1 || s.log[0] != 2 {
			t.Errorf("a fixed Governor set %v, want just 2", s.log)
		}
		var none *Governor
		none.Begin()
		none.End()
		none.StartBegin()
		none.StartEnd()
		none.Stop()
		if none.Adaptive() {
			t.Error("a nil Governor says it is adaptive")
		}
	})
}

// Stop puts the Ps back to Low and nothing raises them after it.
func TestStopLowersAndStays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, _ := newGov(t, Options{Low: 1, High: 2, Crowd: 1})
		g.Begin()
		if s.get() != 2 {
			t.Fatalf("Ps %d, want 2", s.get())
		}
		g.Stop()
		if s.get() != 1 {
			t.Fatalf("Stop left the Ps at %d", s.get())
		}
		g.StartBegin()
		g.Begin()
		time.Sleep(time.Second)
		if s.get() != 1 {
			t.Fatalf("the Ps went up to %d after Stop", s.get())
		}
	})
}

// Commands from many goroutines at once (under -race): the count comes back
// to zero and the Ps end at Low.
func TestConcurrentCommands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, _ := newGov(t, Options{Low: 1, High: 2, Crowd: 4, Window: 10 * time.Millisecond, Tune: true, TrialCommands: 7, TrialEvery: 13})
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 100 {
					g.Begin()
					time.Sleep(time.Millisecond)
					g.End()
				}
			})
		}
		wg.Wait()
		if n := g.inFlight.Load(); n != 0 {
			t.Fatalf("%d commands still counted in flight", n)
		}
		if s.get() != 2 {
			t.Fatalf("32 goroutines' commands left the Ps at %d", s.get())
		}
		time.Sleep(30 * time.Millisecond)
		synctest.Wait()
		if s.get() != 1 {
			t.Fatalf("an idle Governor left the Ps at %d", s.get())
		}
	})
}

// machine is a fake CPU clock for trials: each command costs the process
// what cost says for the Ps set at the moment (a fake because a real VM's
// preference cannot be chosen on demand).
type machine struct {
	mu   sync.Mutex
	used time.Duration
	cost map[int]time.Duration
}

func (m *machine) cpu() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

// run has n commands go through g one after another.
func (m *machine) run(g *Governor, s *setter, n int) {
	for range n {
		g.Begin()
		m.mu.Lock()
		m.used += m.cost[s.get()]
		m.mu.Unlock()
		g.End()
	}
}

func tuned(t *testing.T, low, high int, cost map[int]time.Duration) (*Governor, *setter, *machine) {
	t.Helper()
	m := &machine{cost: cost}
	g, s, _ := newGov(t, Options{Low: low, High: high, Tune: true, TrialCommands: 10, TrialEvery: 100, CPU: m.cpu})
	return g, s, m
}

// Where High costs a command less than Low, a trial finds it and the hub
// keeps it while the load is low; the next trial weighs Low again and keeps
// High.
func TestTrialTakesTheCheaperSetting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, m := tuned(t, 1, 2, map[int]time.Duration{1: 130 * time.Microsecond, 2: 110 * time.Microsecond})
		m.run(g, s, 10) // the first trial begins at the 10th command: on Low
		if got := fmt.Sprint(s.log); got != "[1]" {
			t.Fatalf("Ps set %s before the trial's second window, want [1]", got)
		}
		m.run(g, s, 40) // four windows: 1, 2, 1, 2; then 2
		if got := fmt.Sprint(s.log); got != "[1 2 1 2]" {
			t.Fatalf("Ps set %s through the trial, want [1 2 1 2]", got)
		}
		if v := testutil.ToFloat64(g.lowPs); v != 2 {
			t.Errorf("websummoner_hub_procs_low = %v, want 2", v)
		}
		m.run(g, s, 140) // the next trial: 2, 1, 2, 1, and back to 2
		if got := fmt.Sprint(s.log); got != "[1 2 1 2 1 2 1 2]" {
			t.Fatalf("Ps set %s through the second trial, want [1 2 1 2 1 2 1 2]", got)
		}
		if s.get() != 2 || g.low != 2 {
			t.Fatalf("after the second trial the Ps are %d, low %d; want 2 and 2", s.get(), g.low)
		}
		// A crowd's High is where the Ps are already: no switch to count;
		// and after it the Ps stay at the learned 2.
		for range 16 {
			g.Begin()
		}
		for range 16 {
			g.End()
		}
		time.Sleep(2 * DefaultWindow)
		synctest.Wait()
		if s.get() != 2 || testutil.ToFloat64(g.switches) != 0 {
			t.Errorf("after a crowd the Ps are %d and raised_total %v; want 2 and 0", s.get(), testutil.ToFloat64(g.switches))
		}
		g.Stop()
		if s.get() != 2 {
			t.Errorf("Stop set the Ps to %d, want the learned 2", s.get())
		}
	})
}

// An advantage under the margin, or one that holds in one pair of windows
// only, leaves Low as it is.
func TestTrialKeepsLowWithoutAClearGain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, m := tuned(t, 1, 2, map[int]time.Duration{1: 100 * time.Microsecond, 2: 95 * time.Microsecond})
		m.run(g, s, 50)
		if s.get() != 1 || testutil.ToFloat64(g.lowPs) != 1 {
			t.Fatalf("5%% cheaper on 2 moved the low-load Ps to %d (gauge %v); want 1", s.get(), testutil.ToFloat64(g.lowPs))
		}
		// The second pair: 2 dearer by far; the first much cheaper. Not both.
		m.cost = map[int]time.Duration{1: 100 * time.Microsecond, 2: 10 * time.Microsecond}
		m.run(g, s, 120) // to the next trial's start (150), and its first two windows
		m.cost = map[int]time.Duration{1: 100 * time.Microsecond, 2: 500 * time.Microsecond}
		m.run(g, s, 20) // its last two
		if got := fmt.Sprint(s.log); got != "[1 2 1 2 1 2 1 2 1]" || g.low != 1 {
			t.Fatalf("Ps set %s, low %d; want [1 2 1 2 1 2 1 2 1] and 1", got, g.low)
		}
	})
}

// A driver start or a crowd in a window voids the trial (they are not the
// low load it weighs), and so does a window that takes too long; the trial
// after runs whole.
func TestTrialVoided(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, m := tuned(t, 1, 2, map[int]time.Duration{1: 130 * time.Microsecond, 2: 100 * time.Microsecond})
		m.run(g, s, 15)
		g.StartBegin()
		g.StartEnd()
		m.run(g, s, 5) // the window ends void: back to Low once the start's window passes
		time.Sleep(2 * DefaultWindow)
		synctest.Wait()
		if s.get() != 1 || g.low != 1 || g.trial.window != -1 {
			t.Fatalf("after a start in a window: Ps %d, low %d, window %d; want 1, 1, -1", s.get(), g.low, g.trial.window)
		}
		m.run(g, s, 105) // the next trial starts at 120 commands; its first window
		time.Sleep(trialMaxWindow + time.Second)
		m.run(g, s, 10) // ends late: void
		if g.low != 1 || g.trial.window != -1 || s.get() != 1 {
			t.Fatalf("after a slow window: Ps %d, low %d, window %d; want 1, 1, -1", s.get(), g.low, g.trial.window)
		}
		m.run(g, s, 140) // a whole trial, undisturbed
		if g.low != 2 || s.get() != 2 {
			t.Fatalf("an undisturbed trial left Ps %d, low %d; want 2, 2", s.get(), g.low)
		}
	})
}

// Without Tune the low-load Ps are Low whatever the commands cost.
func TestNoTrialWithoutTune(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &machine{cost: map[int]time.Duration{1: time.Millisecond, 2: time.Microsecond}}
		g, s, _ := newGov(t, Options{Low: 1, High: 2, TrialCommands: 10, TrialEvery: 10, CPU: m.cpu})
		m.run(g, s, 1000)
		if got := fmt.Sprint(s.log); got != "[1]" {
			t.Fatalf("Ps set %s without Tune, want [1]", got)
		}
	})
}

// The process's CPU clock moves with work done.
func TestProcessCPU(t *testing.T) {
	t0 := processCPU()
	for x, end := 0, time.Now().Add(20*time.Millisecond); time.Now().Before(end); x++ {
		_ = x * x
	}
	if d := processCPU() - t0; d < 5*time.Millisecond {
		t.Fatalf("20 ms of a busy loop moved processCPU by %v", d)
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{{Low: 0}, {Low: 1, Crowd: -1}, {Low: 1, Window: -time.Second}, {Low: 1, TrialCommands: -1}, {Low: 1, TrialEvery: -1}} {
		if _, err := New(o, nil, nil); err == nil {
			t.Errorf("New(%+v) accepted it", o)
		}
	}
}

// BenchmarkSwitch is what one switch costs the process (runtime.GOMAXPROCS
// stops the world): the Governor switches at most twice a Window.
func BenchmarkSwitch(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	n := 1
	for b.Loop() {
		n = 3 - n
		runtime.GOMAXPROCS(n)
	}
}
