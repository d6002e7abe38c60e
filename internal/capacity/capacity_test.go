package capacity

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/websummoner/websummoner/internal/queue"
)

const limit = 20

func healthyHost() *fakeHost {
	return &fakeHost{k: 100, base: time.Second, deadline: 30 * time.Second}
}

// timeToReach returns how long until the gate's limit reaches want, sampling
// every 100ms for at most d; -1 if never.
func (s *sim) timeToReach(want int, d time.Duration) time.Duration {
	t0 := time.Now()
	for time.Since(t0) < d {
		if s.g.Stats().Limit >= want {
			return time.Since(t0)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1
}

// 1. Healthy host, demand ≥ -limit: the gate reaches -limit quickly (documented:
// about log2(limit) windows of one start each) and nothing fails.
func TestHealthyHostOpensToLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, Options{Limit: limit}, healthyHost())
		ctx, cancel := context.WithCancel(context.Background())
		s.loop(ctx, 2*limit, 100*time.Millisecond)
		took := s.timeToReach(limit, time.Minute)
		cancel()
		s.wg.Wait()
		if took < 0 || took > 10*time.Second {
			t.Fatalf("reached -limit %d after %v, want ≤ 10s", limit, took)
		}
		if _, fail := s.host.counts(); fail != 0 {
			t.Fatalf("%d failed starts on a healthy host", fail)
		}
		t.Logf("reached -limit %d in %v of fake time", limit, took)
	})
}

// 2. Capacity falls to K: the gate settles at about K within a few windows, and
// failures are bounded; each is counted once.
func TestCapacityFalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := healthyHost()
		s := newSim(t, Options{Limit: limit}, host)
		ctx, cancel := context.WithCancel(context.Background())
		s.loop(ctx, 2*limit, 100*time.Millisecond)
		if s.timeToReach(limit, time.Minute) < 0 {
			t.Fatal("never opened")
		}
		const k = 3
		host.setK(k)
		_, failBefore := host.counts()
		time.Sleep(20 * time.Second) // a few windows to settle
		_, failSettle := host.counts()
		samples := s.every(time.Second, 2*time.Minute)
		_, failAfter := host.counts()
		cancel()
		s.wg.Wait()
		sum := 0
		for _, v := range samples {
			sum += v
		}
		mean := float64(sum) / float64(len(samples))
		if mean < k-1 || mean > k+1.5 {
			t.Errorf("settled at a mean limit of %.2f, want about K=%d; samples %v", mean, k, samples)
		}
		steady := failAfter - failSettle
		if steady > 30 { // 2 minutes at ~1s windows: a probe fails every 6-24 windows
			t.Errorf("%d failed starts in 2 minutes at steady state", steady)
		}
		if settling := failSettle - failBefore; settling > 50 {
			t.Errorf("%d failed starts while settling", settling)
		}
		if got := testutil.ToFloat64(s.g.m.outcomes.WithLabelValues("failure")); int(got) != failAfter {
			t.Errorf("gate counted %v failures, the host saw %d: each must be counted once", got, failAfter)
		}
		t.Logf("capacity 20 → %d: %d failures while settling, %d in the next 2 minutes, mean limit %.2f", k, failSettle-failBefore, steady, mean)
	})
}

// 3. Recovery: capacity returns, the gate climbs back, and failures during the
// climb stay near zero.
func TestRecoveryClimbsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := healthyHost()
		host.k = 3
		s := newSim(t, Options{Limit: limit}, host)
		ctx, cancel := context.WithCancel(context.Background())
		s.loop(ctx, 2*limit, 100*time.Millisecond)
		time.Sleep(time.Minute) // settled near 3
		host.setK(100)
		time.Sleep(2 * time.Second) // starts that began beyond the old capacity end
		_, failBefore := host.counts()
		took := s.timeToReach(limit, 2*time.Minute)
		_, failAfter := host.counts()
		cancel()
		s.wg.Wait()
		if took < 0 || took > time.Minute {
			t.Fatalf("climbed back to %d after %v, want ≤ 1m", limit, took)
		}
		if n := failAfter - failBefore; n > 1 {
			t.Fatalf("%d failures during the climb", n)
		}
		t.Logf("climbed from ~3 to %d in %v with %d failures", limit, took, failAfter-failBefore)
	})
}

// 4. Total outage, then recovery: the gate falls to its floor of one, keeps
// probing, and resumes.
func TestTotalOutageThenRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := healthyHost()
		s := newSim(t, Options{Limit: limit}, host)
		ctx, cancel := context.WithCancel(context.Background())
		s.loop(ctx, 2*limit, 100*time.Millisecond)
		s.timeToReach(limit, time.Minute)
		host.setK(0)
		time.Sleep(3 * time.Minute)
		if l := s.g.Stats().Limit; l != 1 {
			t.Fatalf("during the outage the limit is %d, want the floor 1", l)
		}
		okBefore, _ := host.counts()
		host.setK(100)
		took := s.timeToReach(limit, 3*time.Minute)
		okAfter, _ := host.counts()
		cancel()
		s.wg.Wait()
		if okAfter == okBefore || took < 0 {
			t.Fatalf("never resumed: limit %d, %d successes", s.g.Stats().Limit, okAfter-okBefore)
		}
		t.Logf("after the outage: back to %d in %v", limit, took)
	})
}

// 5. Idle, then a burst: the limit did not drift upward while idle, and the burst
// is admitted at the limit.
func TestIdleThenBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := healthyHost()
		host.k = 3
		s := newSim(t, Options{Limit: limit}, host)
		ctx, cancel := context.WithCancel(context.Background())
		s.loop(ctx, 2*limit, 100*time.Millisecond)
		time.Sleep(time.Minute)
		cancel()
		s.wg.Wait()
		before := s.g.Stats().Limit
		host.setK(100)
		time.Sleep(time.Hour) // idle, capacity back
		if after := s.g.Stats().Limit; after != before {
			t.Fatalf("limit drifted from %d to %d while idle", before, after)
		}
		host.mu.Lock()
		host.maxSeen = 0
		host.mu.Unlock()
		var wg sync.WaitGroup
		for i := range 3 * limit {
			wg.Go(func() { s.session(context.Background(), time.Second, 1, rand.New(rand.NewPCG(uint64(i), 1))) })
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if st := s.g.Stats(); st.InFlight != before {
			t.Fatalf("burst: %d starts in flight at once, want the limit %d", st.InFlight, before)
		}
		wg.Wait()
	})
}

// 6. Cold, then warm starts, and a later shift to slower starts: the baseline
// follows and the gate does not stay low.
func TestBaselineShift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := healthyHost()
		host.base = 10 * time.Second // cold: images not cached
		s := newSim(t, Options{Limit: limit}, host)
		ctx, cancel := context.WithCancel(context.Background())
		s.loop(ctx, 2*limit, 100*time.Millisecond)
		time.Sleep(30 * time.Second)
		host.setBase(time.Second) // warm
		if took := s.timeToReach(limit, 3*time.Minute); took < 0 {
			t.Fatalf("cold → warm: stuck at %d", s.g.Stats().Limit)
		}
		host.setBase(8 * time.Second) // a slower image: 8× the warm baseline
		time.Sleep(time.Minute)
		took := s.timeToReach(limit, 10*time.Minute)
		cancel()
		s.wg.Wait()
		if took < 0 {
			t.Fatalf("warm → slow: stuck at %d, baseline %.1fs", s.g.Stats().Limit, s.g.Stats().Baseline)
		}
		if _, fail := host.counts(); fail != 0 {
			t.Fatalf("%d failures on a host that never failed", fail)
		}
		t.Logf("after a shift to 8s starts the gate was back at %d within %v more (baseline %.1fs)", limit, took+time.Minute, s.g.Stats().Baseline)
	})
}

// stampede runs 200 requests queued behind an outage against a host of capacity
// K, each retrying a failed start after a 1-5s back-off, for at most 30 minutes
// of fake time. It returns the failed starts, how many were served, and the time
// until the last was served.
func stampede(t *testing.T, opts Options, k int) (fails, served int, drain time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		host := &fakeHost{k: 0, base: time.Second, deadline: 10 * time.Second}
		s := newSim(t, opts, host)
		s.g.SetHealthy(false) // the outage: the engine is down
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute+stampedeCap)
		defer cancel()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var last time.Time
		for i := range 200 {
			wg.Go(func() {
				if s.session(ctx, 10*time.Second, 1<<30, rand.New(rand.NewPCG(uint64(i), 3))) {
					mu.Lock()
					served++
					last = time.Now()
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		host.setK(k)
		t0 := time.Now()
		s.g.SetHealthy(true) // the engine is back: the stampede
		wg.Wait()
		drain = last.Sub(t0)
		if served < 200 {
			drain = time.Since(t0) // did not finish
		}
		_, fails = host.counts()
	})
	return fails, served, drain
}

// The side-by-side run of docs/capacity.md: the same fake host after an outage,
// the gate pinned at -limit against the adaptive gate.
func TestStampedeSideBySide(t *testing.T) {
	const k = 3
	fixedFails, fixedServed, fixedDrain := stampede(t, Options{Limit: limit, Mode: Fixed, Fixed: limit}, k)
	adaptFails, adaptServed, adaptDrain := stampede(t, Options{Limit: limit}, k)
	t.Logf("| gate | failed starts | served | time to serve all 200 |")
	t.Logf("| pinned at -limit %d | %d | %d | %v |", limit, fixedFails, fixedServed, fixedDrain.Round(time.Second))
	t.Logf("| adaptive | %d | %d | %v |", adaptFails, adaptServed, adaptDrain.Round(time.Second))
	if adaptServed != 200 {
		t.Fatalf("adaptive served %d of 200", adaptServed)
	}
	if adaptFails*10 > fixedFails {
		t.Errorf("adaptive failed %d starts, pinned %d: want at least 10× fewer", adaptFails, fixedFails)
	}
	if fixedServed == 200 && adaptDrain > fixedDrain {
		t.Errorf("adaptive drained in %v, pinned in %v: want no later", adaptDrain, fixedDrain)
	}
}

func TestOptionsValidation(t *testing.T) {
	if _, err := New(Options{Limit: 5, Mode: Fixed, Fixed: 6}, nil, nil); err == nil {
		t.Error("fixed above -limit accepted")
	}
	if _, err := New(Options{Limit: -1}, nil, nil); err == nil {
		t.Error("limit -1 accepted")
	}
	if g, err := New(Options{}, nil, nil); err != nil || g.opts.Limit != queue.DefaultLimit {
		t.Errorf("the zero Options: %v; want a gate up to queue.DefaultLimit", err)
	}
	g, _ := New(Options{Limit: 5, Mode: Off}, nil, nil)
	for range 5 {
		if !g.TryStart(1) {
			t.Fatal("off mode refused a start under -limit")
		}
	}
	g.SetHealthy(false)
	if g.Stats().Limit != 5 {
		t.Error("a pinned gate moved")
	}
}

// stampedeCap bounds the side-by-side run in fake time.
var stampedeCap = 30 * time.Minute

// While the engine is down no start is attempted; when it answers again the gate
// is half-open: one probe start, then it ramps up from there.
func TestEngineHealthHalfOpen(t *testing.T) {
	g, _ := New(Options{Limit: 8, Initial: 4}, nil, nil)
	g.SetHealthy(false)
	if g.TryStart(1) || g.CanStart(1) {
		t.Fatal("a start was permitted while the engine is down")
	}
	g.SetHealthy(true)
	if st := g.Stats(); st.Limit != 1 || !st.Healthy {
		t.Fatalf("after recovery: %+v, want half-open at 1", st)
	}
	if !g.TryStart(1) || g.TryStart(1) {
		t.Fatal("half-open must permit exactly one probe")
	}
	g.FinishStart(1, "", queue.StartSucceeded, time.Second)
	if !g.CanStart(1) {
		t.Fatal("the probe's success did not let the next start through")
	}
}

// A start with a video recorder starts two containers and weighs two with the
// gate; one that weighs more than the limit still runs, alone.
func TestStartCost(t *testing.T) {
	g, _ := New(Options{Limit: 8, Mode: Fixed, Fixed: 3}, nil, nil)
	if !g.TryStart(2) {
		t.Fatal("a cost-2 start refused by an empty gate of 3")
	}
	if g.TryStart(2) || g.CanStart(2) {
		t.Fatal("2 + 2 starts in flight under a limit of 3")
	}
	if !g.TryStart(1) {
		t.Fatal("2 + 1 refused under a limit of 3")
	}
	if st := g.Stats(); st.InFlight != 3 {
		t.Fatalf("in flight %d, want 3", st.InFlight)
	}
	g.FinishStart(2, "", queue.StartSucceeded, time.Second)
	g.FinishStart(1, "", queue.StartSucceeded, time.Second)
	if st := g.Stats(); st.InFlight != 0 {
		t.Fatalf("in flight %d after both finished, want 0", st.InFlight)
	}
	one, _ := New(Options{Limit: 8, Mode: Fixed, Fixed: 1}, nil, nil)
	if !one.TryStart(2) {
		t.Fatal("a cost-2 start can never run under a limit of 1")
	}
	if one.TryStart(1) {
		t.Fatal("a start ran beside one that already exceeds the limit")
	}
}

// Warm-pool fills never take the permit a client's start could use, yet a
// healthy window of fills alone grows the gate as a full one would: else a
// gate at its initial limit of 2 runs one fill at a time for ever.
func TestSpareStartsGrowTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := New(Options{Limit: 10}, nil, nil)
		if st := g.Stats(); st.Limit != 2 {
			t.Fatalf("initial limit %d, want 2", st.Limit)
		}
		if !g.TrySpare(1) {
			t.Fatal("a fill refused by an empty gate")
		}
		if g.TrySpare(1) {
			t.Fatal("a second fill took the last permit, a client's")
		}
		if !g.CanStart(1) {
			t.Fatal("a fill left no permit to a client")
		}
		time.Sleep(2 * time.Second) // one start's time: the window closes with it
		g.FinishStart(1, "", queue.StartSucceeded, 2*time.Second)
		if st := g.Stats(); st.Limit != 4 {
			t.Fatalf("limit after a healthy window of fills = %d, want 4", st.Limit)
		}
		first, second := g.TrySpare(1), g.TrySpare(1)
		if !first || !second {
			t.Fatal("two fills could not overlap under a limit of 4")
		}
		if !g.CanStart(1) {
			t.Fatal("two fills left no permit to a client")
		}
		g.FinishStart(1, "", queue.StartSucceeded, 2*time.Second)
		g.FinishStart(1, "", queue.StartSucceeded, 2*time.Second)

		// A client's start beside fills: they still leave one permit free.
		client, fill1, fill2, fill3 := g.TryStart(1), g.TrySpare(1), g.TrySpare(1), g.TrySpare(1)
		if !client || !fill1 || !fill2 || fill3 || !g.CanStart(1) {
			t.Fatalf("a client's start and fills under a limit of 4: %+v, want two fills and a permit left", g.Stats())
		}
	})
}

// A healthy host serving two browsers whose normal starts differ 300-fold
// (a cached stub and a slow image): each start is judged against its own
// browser's baseline, so the slow one's normal start is no congestion. With
// one baseline for all, every slow start cut the gate, which sat at 1 and
// made the fast browser's clients wait seconds for a free slot.
func TestKindsHaveTheirOwnBaselines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := New(Options{Limit: 6}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		q, err := queue.New(queue.Options{Limit: 6, Gate: g}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range 4 {
			kind, start := "fast 1", 10*time.Millisecond
			if i%2 == 1 {
				kind, start = "slow 1", 3*time.Second
			}
			wg.Go(func() {
				for ctx.Err() == nil {
					slot, out := q.Acquire(ctx, queue.Request{Kind: kind})
					if !out.Admitted {
						return
					}
					time.Sleep(start)
					slot.Started(queue.StartSucceeded)
					time.Sleep(2 * time.Second)
					slot.Release()
				}
			})
		}
		time.Sleep(10 * time.Second)
		least := 6
		for range 50 {
			time.Sleep(time.Second)
			least = min(least, g.Stats().Limit)
		}
		cancel()
		wg.Wait()
		if least < 4 {
			t.Fatalf("the gate fell to %d on a healthy host serving 4 clients, want ≥ 4 (each start is normal for its browser)", least)
		}
	})
}

// The window is one start of the slowest kind started lately: a browser
// started once long ago no longer holds every window at its length (the
// gate grew and cut once per 30 s for every browser after one slow start).
func TestWindowForgetsKindsNotStartedLately(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := New(Options{Limit: 8}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := func(kind string, latency time.Duration) {
			if !g.TryStart(1) {
				t.Fatal("no permit")
			}
			g.FinishStart(1, kind, queue.StartSucceeded, latency)
		}
		start("slow 1", 20*time.Second)
		start("fast 1", 100*time.Millisecond)
		if w := g.windowLocked(time.Now()); w != 20*time.Second {
			t.Fatalf("window %v right after the slow start, want its 20s", w)
		}
		for range 130 {
			time.Sleep(time.Second)
			start("fast 1", 100*time.Millisecond)
		}
		if w := g.windowLocked(time.Now()); w != 500*time.Millisecond {
			t.Fatalf("window %v two minutes after the slow kind's last start, want the fast kind's (the 500ms floor)", w)
		}
	})
}
