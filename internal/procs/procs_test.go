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
		g, s, _ := newGov(t, Options{Low: 1, High: 2, Crowd: 4, Window: 10 * time.Millisecond})
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

func TestValidate(t *testing.T) {
	for _, o := range []Options{{Low: 0}, {Low: 1, Crowd: -1}, {Low: 1, Window: -time.Second}} {
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
