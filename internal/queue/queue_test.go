package queue

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestDerivedNumbers(t *testing.T) {
	cases := []struct {
		name                     string
		opts                     Options
		fast, keeping, saturated time.Duration
	}{
		{"5m", Options{Limit: 2, Timeout: 5 * time.Minute}, 15 * time.Second, 5 * time.Minute, 30 * time.Second},
		{"10s floors fast to 1s", Options{Limit: 2, Timeout: 10 * time.Second}, time.Second, 10 * time.Second, time.Second},
		{"5s floors saturated to 1s", Options{Limit: 2, Timeout: 5 * time.Second}, time.Second, 5 * time.Second, time.Second},
		{"explicit 500ms is not floored", Options{Limit: 2, Timeout: 5 * time.Minute, CongestionTimeout: 500 * time.Millisecond, CongestionTimeoutSet: true}, 15 * time.Second, 5 * time.Minute, 500 * time.Millisecond},
		{"explicit 0", Options{Limit: 2, Timeout: 5 * time.Minute, CongestionTimeoutSet: true}, 15 * time.Second, 5 * time.Minute, 0},
		{"unset", Options{Limit: 2}, time.Second, 0, 0},
	}
	for _, c := range cases {
		o, err := c.opts.Resolve()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if o.FastThreshold != c.fast || o.KeepingUpBudget != c.keeping || o.SaturatedBudget != c.saturated {
			t.Errorf("%s: got fast=%v keeping=%v saturated=%v, want %v %v %v", c.name,
				o.FastThreshold, o.KeepingUpBudget, o.SaturatedBudget, c.fast, c.keeping, c.saturated)
		}
		if c.opts.Timeout > 0 && !strings.Contains(o.String(), "saturated-budget="+c.saturated.String()) {
			t.Errorf("%s: start-up summary %q lacks the saturated budget", c.name, o.String())
		}
	}
}

// The zero Options work: a queue of DefaultLimit slots, waiting without a
// budget.
func TestZeroOptions(t *testing.T) {
	q, err := New(Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Limit != DefaultLimit {
		t.Fatalf("limit %d, want DefaultLimit %d", st.Limit, DefaultLimit)
	}
	if o := q.Options(); o.KeepingUpBudget != 0 || o.FastThreshold != time.Second {
		t.Fatalf("derived %+v, want no budget and a 1s fast threshold", o)
	}
}

func TestInvalidOptions(t *testing.T) {
	cases := []struct {
		opts Options
		want string
	}{
		{Options{Limit: -3}, "-limit must be a whole number from 1 to 10000 (got -3)"},
		{Options{Limit: 1, Timeout: -time.Second}, "-queue-timeout must be 0"},
		{Options{Limit: 1, Timeout: time.Minute, CongestionTimeout: -time.Second, CongestionTimeoutSet: true}, "-queue-congestion-timeout must be 0"},
		{Options{Limit: 1, CongestionTimeout: time.Second, CongestionTimeoutSet: true}, "-queue-congestion-timeout 1s needs -queue-timeout"},
	}
	for _, c := range cases {
		_, err := New(c.opts, nil, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want it to contain %q", c.opts, err, c.want)
		}
	}
}

// An explicit -queue-congestion-timeout 0 refuses at once when saturated, and 500ms
// is honoured exactly rather than floored to 1s.
func TestExplicitCongestionTimeout(t *testing.T) {
	for _, ct := range []time.Duration{0, 500 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Options{Limit: 1, Timeout: 10 * time.Second, CongestionTimeout: ct, CongestionTimeoutSet: true})
			a := h.acquire("A", false)
			time.Sleep(11 * time.Second)
			start := time.Now()
			p := h.acquire("B", false)
			<-p.done
			if p.out.Reason != ReasonShed || p.out.State != Saturated || p.out.Budget != ct || time.Since(start) != ct || p.out.Waited != ct {
				t.Errorf("congestion timeout %v: got %+v after %v", ct, p.out, time.Since(start))
			}
			if h.metric("websummoner_queue_rejected_total", "reason", "shed") != 1 {
				t.Error("shed not counted")
			}
			a.slot.Release()
		})
	}
}

func TestOutcomes(t *testing.T) {
	t.Run("disable-queue refuses at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Options{Limit: 1, Timeout: time.Minute, Disabled: true})
			a := h.acquire("A", false)
			p := h.acquire("B", false)
			if !p.finished() || p.out.Reason != ReasonDisabled || p.out.Waited != 0 || p.out.Queued {
				t.Fatalf("got %+v", p.out)
			}
			if !strings.Contains(p.out.Message(), "-disable-queue") {
				t.Errorf("message %q does not name the flag", p.out.Message())
			}
			if h.metric("websummoner_queue_rejected_total", "reason", "disabled") != 1 || h.metric("websummoner_queue_congested") != 0 {
				t.Error("metrics")
			}
			if l := h.logs.take(); !strings.Contains(l, "[QUEUE_DISABLED]") || !strings.Contains(l, "[not queued] [no retry-after]") {
				t.Errorf("no [QUEUE_DISABLED] line saying it was not queued and has no Retry-After: %s", l)
			}
			a.slot.Release()
		})
	})
	t.Run("no-wait refuses at once, only when full", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Options{Limit: 1, Timeout: time.Minute})
			a := h.acquire("A", true)
			if !a.out.Admitted {
				t.Fatal("no-wait with a free slot must be admitted")
			}
			p := h.acquire("B", true)
			if !p.finished() || p.out.Reason != ReasonNoWait || p.out.Waited != 0 || p.out.RetryAfter < time.Second {
				t.Fatalf("got %+v", p.out)
			}
			if h.metric("websummoner_queue_rejected_total", "reason", "no_wait") != 1 {
				t.Error("no_wait not counted")
			}
			if l := h.logs.take(); !strings.Contains(l, "[QUEUE_NO_WAIT]") || !strings.Contains(l, "[not queued]") {
				t.Errorf("no [QUEUE_NO_WAIT] line saying it was not queued: %s", l)
			}
			a.slot.Release()
		})
	})
	t.Run("budget elapses", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Options{Limit: 1, Timeout: time.Minute})
			a := h.acquire("A", false)
			p := h.acquire("B", false)
			<-p.done
			if p.out.Reason != ReasonTimeout || p.out.Waited != time.Minute {
				t.Fatalf("got %+v", p.out)
			}
			for _, s := range []string{"waited 1m0s", "keeping up", "-queue-timeout", "-limit"} {
				if !strings.Contains(p.out.Message(), s) {
					t.Errorf("message %q lacks %q", p.out.Message(), s)
				}
			}
			a.slot.Release()
		})
	})
	t.Run("client disconnects first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Options{Limit: 1, Timeout: time.Minute})
			a := h.acquire("A", false)
			b := h.acquire("B", false)
			c := h.acquire("C", false)
			time.Sleep(10 * time.Second)
			b.cancel()
			synctest.Wait()
			if b.out.Reason != ReasonCancelled || b.slot != nil {
				t.Fatalf("B: %+v", b.out)
			}
			if st := h.q.Stats(); st.Waiting != 1 || st.InUse != 1 {
				t.Fatalf("after B left: %+v", st)
			}
			// The slot goes to C, not to B who left.
			a.slot.Release()
			synctest.Wait()
			if !c.out.Admitted {
				t.Fatalf("C: %+v", c.out)
			}
			c.slot.Release()
			if st := h.q.Stats(); st.InUse != 0 || st.Waiting != 0 {
				t.Fatalf("leak: %+v", st)
			}
			for _, r := range []string{"no_wait", "timeout", "shed", "disabled"} {
				if h.metric("websummoner_queue_rejected_total", "reason", r) != 0 {
					t.Errorf("a disconnect counted as %s", r)
				}
			}
		})
	})
	t.Run("slot frees first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Options{Limit: 1, Timeout: time.Minute})
			a := h.acquire("A", false)
			b := h.acquire("B", false)
			time.Sleep(59 * time.Second)
			a.slot.Release()
			synctest.Wait()
			if !b.out.Admitted || b.out.Waited != 59*time.Second || b.out.Fast {
				t.Fatalf("B: %+v", b.out)
			}
			// A slow admission does not reset idle.
			if idle := h.q.Stats().Idle; idle != 59*time.Second {
				t.Errorf("idle after slow admission = %v, want 59s", idle)
			}
			b.slot.Release()
		})
	})
}

// A client whose context ended while the slot was on its way is skipped, and the
// slot goes to the next live waiter: the oldest LIVE waiter, not merely the oldest.
func TestHandOffSkipsDeadWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 1})
		a := h.acquire("A", false)
		ctx, cancel := context.WithCancel(context.Background())
		w := &waiter{ctx: ctx, ready: make(chan struct{}), queued: time.Now()}
		h.q.mu.Lock()
		w.elem = h.q.waiters.PushBack(w) // as if its Acquire had not yet noticed the cancel
		h.q.mu.Unlock()
		cancel()
		c := h.acquire("C", false)
		a.slot.Release()
		synctest.Wait()
		if w.granted || !c.out.Admitted {
			t.Fatalf("dead waiter granted=%v, C=%+v", w.granted, c.out)
		}
		c.slot.Release()
		if st := h.q.Stats(); st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("%+v", st)
		}
	})
}

// Nothing but a fast admission resets idle: not a refusal, not the queue emptying.
func TestIdleResetsOnlyOnFastAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 1, Timeout: 20 * time.Second}) // fast threshold 1s
		a := h.acquire("A", false)
		time.Sleep(5 * time.Second)
		h.acquire("B", true) // refused no-wait
		p := h.acquire("C", false)
		time.Sleep(3 * time.Second)
		p.cancel() // queue empties
		synctest.Wait()
		if idle := h.q.Stats().Idle; idle != 8*time.Second {
			t.Fatalf("idle = %v, want 8s", idle)
		}
		q := h.acquire("D", false)
		time.Sleep(time.Second)
		a.slot.Release() // D admitted after exactly 1s: fast
		synctest.Wait()
		if !q.out.Fast || h.q.Stats().Idle != 0 {
			t.Fatalf("D: %+v idle %v", q.out, h.q.Stats().Idle)
		}
		q.slot.Release()
	})
}

// With -queue-timeout unset a request waits as long as its client does, well past
// an hour, and the grid is never reported congested.
func TestUnsetTimeoutWaitsIndefinitely(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 1})
		a := h.acquire("A", false)
		p := h.acquire("B", false)
		for range 5 {
			time.Sleep(time.Hour)
			synctest.Wait()
			if p.finished() {
				t.Fatalf("B gave up: %+v", p.out)
			}
			if h.metric("websummoner_queue_congested") != 0 {
				t.Fatal("congested with the timeout unset")
			}
		}
		a.slot.Release()
		synctest.Wait()
		if !p.out.Admitted || p.out.Waited != 5*time.Hour || p.out.Budget != 0 {
			t.Fatalf("B: %+v", p.out)
		}
		p.slot.Release()
	})
}

// A grid with free slots is never congested, however long since a fast admission.
func TestFreeSlotsAreNotCongested(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 2, Timeout: time.Minute})
		a := h.acquire("A", false)
		time.Sleep(time.Hour)
		if h.metric("websummoner_queue_congested") != 0 {
			t.Fatal("congested with a free slot")
		}
		b := h.acquire("B", false) // fast: resets idle
		if h.metric("websummoner_queue_congested") != 0 {
			t.Fatal("congested right after a fast admission")
		}
		time.Sleep(61 * time.Second)
		if h.metric("websummoner_queue_congested") != 1 {
			t.Fatal("full and idle > timeout must be congested")
		}
		a.slot.Release()
		b.slot.Release()
	})
}

// Ten no-wait requests at once against five free slots: exactly five sessions and
// five refusals, every time. The check and the take are one step.
func TestNoWaitIsAtomic(t *testing.T) {
	for range 200 {
		q, err := New(Options{Limit: 5, Timeout: time.Minute}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var admitted, refused atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		slots := make(chan *Slot, 10)
		for range 10 {
			wg.Go(func() {
				<-start
				s, out := q.Acquire(context.Background(), Request{NoWait: true})
				if out.Admitted {
					admitted.Add(1)
					slots <- s
				} else if out.Reason == ReasonNoWait {
					refused.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if admitted.Load() != 5 || refused.Load() != 5 {
			t.Fatalf("admitted %d refused %d, want 5 and 5", admitted.Load(), refused.Load())
		}
		close(slots)
		for s := range slots {
			s.Release()
		}
	}
}

func TestRetryAfterDistribution(t *testing.T) {
	cases := []struct {
		timeout time.Duration
		hi      int
	}{{5 * time.Minute, 300}, {0, int(DefaultRetryAfterMax / time.Second)}, {1500 * time.Millisecond, 1}}
	for _, c := range cases {
		q, err := New(Options{Limit: 1, Timeout: c.timeout}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := q.Acquire(context.Background(), Request{})
		counts := make(map[int]int)
		draws := 100 * c.hi
		for range draws {
			_, out := q.Acquire(context.Background(), Request{NoWait: true})
			ra := out.RetryAfter
			if ra%time.Second != 0 || ra < time.Second || ra > time.Duration(c.hi)*time.Second {
				t.Fatalf("timeout %v: Retry-After %v out of [1s, %ds]", c.timeout, ra, c.hi)
			}
			counts[int(ra/time.Second)]++
		}
		if counts[1] == 0 || counts[c.hi] == 0 {
			t.Errorf("timeout %v: ends not reached: 1→%d %d→%d", c.timeout, counts[1], c.hi, counts[c.hi])
		}
		if len(counts) != c.hi {
			t.Errorf("timeout %v: %d distinct values, want %d", c.timeout, len(counts), c.hi)
		}
		for v, n := range counts {
			if c.hi > 1 && n > 3*draws/c.hi {
				t.Errorf("timeout %v: value %d drawn %d times of %d: dominates", c.timeout, v, n, draws)
			}
		}
		s.Release()
	}
}

// Thousands of acquires, releases, cancellations and budget expiries from many
// goroutines, on the real clock: at every step no more than -limit slots are held,
// and at the end every gauge is back to zero.
func TestStress(t *testing.T) {
	const limit, workers, perWorker = 4, 64, 60
	h := &harness{t: t, logs: &syncBuffer{}}
	var err error
	h.reg = prometheus.NewRegistry()
	h.q, err = New(Options{Limit: limit, Timeout: 40 * time.Millisecond}, nil, h.reg)
	if err != nil {
		t.Fatal(err)
	}
	var holders atomic.Int32
	var wg sync.WaitGroup
	var admitted, refused, cancelled atomic.Int32
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range perWorker {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(30))*time.Millisecond)
				s, out := h.q.Acquire(ctx, Request{NoWait: r.IntN(8) == 0})
				cancel()
				switch {
				case out.Admitted:
					admitted.Add(1)
					if n := holders.Add(1); n > limit {
						t.Errorf("%d holders, limit %d", n, limit)
					}
					if st := h.q.Stats(); st.InUse > limit {
						t.Errorf("in use %d > limit", st.InUse)
					}
					if r.IntN(3) == 0 {
						runtime.Gosched()
					}
					holders.Add(-1)
					s.Release()
					if r.IntN(10) == 0 {
						s.Release() // double release must be harmless
					}
				case out.Reason == ReasonCancelled:
					cancelled.Add(1)
				default:
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load() + refused.Load() + cancelled.Load(); got != workers*perWorker {
		t.Fatalf("outcomes %d, want %d", got, workers*perWorker)
	}
	st := h.q.Stats()
	if st.InUse != 0 || st.Waiting != 0 {
		t.Fatalf("after stress: %+v", st)
	}
	for _, m := range []string{"websummoner_queue_waiting", "websummoner_queue_slots_in_use", "websummoner_queue_congested"} {
		if v := h.metric(m); v != 0 {
			t.Errorf("%s = %v after stress", m, v)
		}
	}
	t.Logf("admitted %d, refused %d, cancelled %d", admitted.Load(), refused.Load(), cancelled.Load())
}

// Close refuses the waiters at once and every later request; held slots stay held.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 1, Timeout: time.Minute})
		a := h.acquire("A", false)
		b := h.acquire("B", false)
		h.q.Close()
		synctest.Wait()
		if b.out.Reason != ReasonClosed || b.out.RetryAfter < time.Second {
			t.Fatalf("B: %+v", b.out)
		}
		if c := h.acquire("C", false); c.out.Reason != ReasonClosed {
			t.Fatalf("C: %+v", c.out)
		}
		if st := h.q.Stats(); st.InUse != 1 || st.Waiting != 0 {
			t.Fatalf("%+v", st)
		}
		if h.metric("websummoner_queue_rejected_total", "reason", "shutdown") != 2 {
			t.Error("shutdown refusals not counted")
		}
		a.slot.Release()
		if st := h.q.Stats(); st.InUse != 0 {
			t.Fatalf("%+v", st)
		}
	})
}

// fakeGate permits a set number of starts; a test stands in for internal/capacity.
type fakeGate struct {
	mu       sync.Mutex
	permits  int
	inFlight int
	finished []StartOutcome
	costs    []int // of each TryStart that succeeded
	wake     func()
}

func (g *fakeGate) TryStart(cost int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight+cost > g.permits {
		return false
	}
	g.inFlight += cost
	g.costs = append(g.costs, cost)
	return true
}

func (g *fakeGate) Notify(wake func()) { g.wake = wake }

func (g *fakeGate) CanStart(cost int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight+cost <= g.permits
}

func (g *fakeGate) FinishStart(cost int, _ string, o StartOutcome, _ time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight -= cost
	g.finished = append(g.finished, o)
}

// A waiter is admitted when a slot is free AND the gate permits a start; waiting
// for the gate is queue wait, under the same budget; a started session no longer
// counts against the gate.
func TestGateIsPartOfAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{permits: 1}
		h := newHarness(t, Options{Limit: 5, Timeout: time.Minute, Gate: g})
		a := h.acquire("A", false)
		if !a.out.Admitted {
			t.Fatal("A")
		}
		b := h.acquire("B", false) // slots free, but the gate is full
		if b.finished() {
			t.Fatalf("B admitted past a full gate: %+v", b.out)
		}
		if h.metric("websummoner_queue_waiting") != 1 {
			t.Fatal("B is not counted as waiting")
		}
		time.Sleep(10 * time.Second)
		a.slot.Started(StartSucceeded) // A's browser is up: the gate frees, B may start
		g.wake()                       // what capacity.Gate does through Notify
		synctest.Wait()
		if !b.out.Admitted || b.out.Waited != 10*time.Second {
			t.Fatalf("B: %+v", b.out)
		}
		c := h.acquire("C", false)
		<-c.done // the gate never frees: C's keeping-up budget runs out
		if c.out.Reason != ReasonTimeout || c.out.Waited != time.Minute {
			t.Fatalf("C: %+v", c.out)
		}
		b.slot.Release() // never reported: counted as ignored
		a.slot.Release()
		if len(g.finished) != 2 || g.finished[0] != StartSucceeded || g.finished[1] != StartIgnored || g.inFlight != 0 {
			t.Fatalf("gate saw %v, in flight %d", g.finished, g.inFlight)
		}
	})
}

// A slot whose start has ended takes a start permit again (a warm
// browser's near hit starts a browser on it): it waits for the gate as
// any start does, before queued requests, and gives the permit back once
// reported; a holder that leaves while waiting takes none.
func TestRestartWaitsForTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{permits: 1}
		h := newHarness(t, Options{Limit: 5, Timeout: time.Minute, Gate: g})
		a := h.acquire("A", false)
		a.slot.Started(StartSucceeded) // a warm browser, ready
		b := h.acquire("B", false)     // B's start holds the gate
		restarted := make(chan error, 1)
		go func() { restarted <- a.slot.Restart(context.Background(), "chrome 1 (warm)") }()
		synctest.Wait()
		select {
		case err := <-restarted:
			t.Fatalf("a restart past a full gate: %v", err)
		default:
		}
		c := h.acquire("C", false) // queued behind the restart for the next permit
		b.slot.Started(StartSucceeded)
		g.wake()
		synctest.Wait()
		if err := <-restarted; err != nil || c.finished() {
			t.Fatalf("the freed permit: restart %v, C admitted %v; want the restart's", err, c.finished())
		}
		a.slot.Started(StartSucceeded)
		g.wake()
		synctest.Wait()
		if !c.finished() || !c.out.Admitted {
			t.Fatalf("C once the restarted start ended: %+v", c.out)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { restarted <- b.slot.Restart(ctx, "chrome 1 (warm)") }()
		synctest.Wait()
		cancel()
		if err := <-restarted; err == nil {
			t.Fatal("a restart whose holder left took a permit")
		}
		for _, p := range []*pending{a, b, c} {
			p.slot.Release()
		}
		if g.inFlight != 0 || len(g.finished) != 4 {
			t.Fatalf("gate: %d in flight, saw %v", g.inFlight, g.finished)
		}
	})
}

func TestQueueMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 1, Timeout: time.Minute, MaxWaiting: 2})
		a := h.acquire("A", false)
		b, c := h.acquire("B", false), h.acquire("C", false)
		d := h.acquire("D", false)
		if !d.finished() || d.out.Reason != ReasonFull || d.out.RetryAfter < time.Second {
			t.Fatalf("D: %+v", d.out)
		}
		if h.metric("websummoner_queue_rejected_total", "reason", "full") != 1 || !strings.Contains(d.out.Message(), "-queue-max") {
			t.Fatal("full not counted or explained")
		}
		b.cancel()
		c.cancel()
		synctest.Wait()
		a.slot.Release()
	})
}

// -queue-max-bytes bounds what the waiters hold together; the first waiter
// waits however large it is, and what leaves the queue by any way (admitted,
// gone, timed out, closed) is no longer counted.
func TestQueueMaxBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 1, Timeout: time.Minute, MaxWaitingBytes: 100})
		a := h.acquireReq(Request{ID: "A", Bytes: 1000}) // admitted: held bytes count only while waiting
		b := h.acquireReq(Request{ID: "B", Bytes: 150})  // over the bound alone, but first in line
		if !a.out.Admitted || b.finished() || h.metric("websummoner_queue_waiting_bytes") != 150 {
			t.Fatalf("A %+v, B finished %v, waiting bytes %v", a.out, b.finished(), h.metric("websummoner_queue_waiting_bytes"))
		}
		c := h.acquireReq(Request{ID: "C", Bytes: 1})
		if !c.finished() || c.out.Reason != ReasonFull || c.out.RetryAfter < time.Second {
			t.Fatalf("C: %+v", c.out)
		}
		if msg := c.out.Message(); !strings.Contains(msg, "-queue-max-bytes (100 bytes)") || !strings.Contains(msg, "hold 150 bytes") {
			t.Fatalf("C's message: %s", msg)
		}
		if h.metric("websummoner_queue_rejected_total", "reason", "full") != 1 {
			t.Fatal("refusal not counted as full")
		}
		b.cancel()
		synctest.Wait()
		if h.metric("websummoner_queue_waiting_bytes") != 0 {
			t.Fatalf("a cancelled waiter is still counted: %v", h.metric("websummoner_queue_waiting_bytes"))
		}
		d := h.acquireReq(Request{ID: "D", Bytes: 60})
		e := h.acquireReq(Request{ID: "E", Bytes: 40}) // 100: at the bound, not over it
		f := h.acquireReq(Request{ID: "F", Bytes: 1})
		if d.finished() || e.finished() || !f.finished() || f.out.Reason != ReasonFull {
			t.Fatalf("D %v, E %v, F %+v", d.finished(), e.finished(), f.out)
		}
		a.slot.Release()
		synctest.Wait()
		if !d.out.Admitted || h.metric("websummoner_queue_waiting_bytes") != 40 {
			t.Fatalf("D %+v, waiting bytes %v", d.out, h.metric("websummoner_queue_waiting_bytes"))
		}
		<-e.done // E's budget runs out
		if e.out.Reason != ReasonTimeout || h.metric("websummoner_queue_waiting_bytes") != 0 {
			t.Fatalf("E %+v, waiting bytes %v", e.out, h.metric("websummoner_queue_waiting_bytes"))
		}
		g, i := h.acquireReq(Request{ID: "G", Bytes: 70}), h.acquireReq(Request{ID: "I", Bytes: 30})
		h.q.Close()
		synctest.Wait()
		if g.out.Reason != ReasonClosed || i.out.Reason != ReasonClosed || h.q.Stats().WaitingBytes != 0 {
			t.Fatalf("G %+v, I %+v, waiting bytes %d", g.out, i.out, h.q.Stats().WaitingBytes)
		}
		d.slot.Release()
	})
}

// A client that left before asking gets no slot.
func TestAcquireAfterClientLeft(t *testing.T) {
	q, _ := New(Options{Limit: 1}, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s, out := q.Acquire(ctx, Request{}); s != nil || out.Reason != ReasonCancelled || q.Stats().InUse != 0 {
		t.Fatalf("%+v", out)
	}
}

// A request's cost reaches the gate when it is admitted, at once or from the
// queue, and goes back with Started.
func TestRequestCostReachesTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{permits: 3}
		q, err := New(Options{Limit: 5, Timeout: time.Minute, Gate: g}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, out := q.Acquire(context.Background(), Request{ID: "A", Cost: 2})
		if !out.Admitted {
			t.Fatal("A not admitted")
		}
		var b *Slot
		done := make(chan struct{})
		go func() {
			defer close(done)
			b, _ = q.Acquire(context.Background(), Request{ID: "B", Cost: 2})
		}()
		synctest.Wait()
		if b != nil || q.Stats().Waiting != 1 {
			t.Fatal("B (cost 2) admitted beside A (cost 2) under 3 permits")
		}
		a.Started(StartSucceeded)
		q.Kick() // what the real gate's Notify does
		<-done
		if b == nil {
			t.Fatal("B not admitted once A's start finished")
		}
		b.Started(StartSucceeded)
		a.Release()
		b.Release()
		g.mu.Lock()
		defer g.mu.Unlock()
		if !slices.Equal(g.costs, []int{2, 2}) || g.inFlight != 0 {
			t.Fatalf("gate saw costs %v, %d in flight; want [2 2], 0", g.costs, g.inFlight)
		}
	})
}

// Notify settles a queued request exactly as Wait does — admitted at a
// release, refused when its budget runs out or the queue closes, cancelled
// when its client leaves — with no goroutine waiting meanwhile; a request
// admitted between Enqueue and Notify is told at once.
func TestNotify(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := New(Options{Limit: 1, Timeout: time.Minute}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		held, out, _ := q.Enqueue(context.Background(), Request{ID: "held"})
		if !out.Admitted {
			t.Fatal("held")
		}
		type result struct {
			slot *Slot
			out  Outcome
		}
		notify := func(ctx context.Context, id string) chan result {
			ch := make(chan result, 1)
			_, _, w := q.Enqueue(ctx, Request{ID: id})
			if w == nil {
				t.Fatalf("%s was not queued", id)
			}
			w.Notify(func(s *Slot, o Outcome) { ch <- result{s, o} })
			return ch
		}
		a := notify(context.Background(), "a")
		ctx, leave := context.WithCancel(context.Background())
		b := notify(ctx, "b")
		synctest.Wait()
		// Every goroutine's stack, not a count: the process's count also moves
		// with other tests' goroutines ending.
		buf := make([]byte, 1<<20)
		if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "queue.(*Waiting)") || strings.Contains(stacks, "queue.(*Queue).settle") {
			t.Fatalf("a goroutine is parked while two requests wait: Notify must not park one\n%s", stacks)
		}
		leave()
		if r := <-b; r.out.Reason != ReasonCancelled || r.slot != nil {
			t.Fatalf("b after its client left: %+v", r.out)
		}
		held.Release()
		r := <-a
		if !r.out.Admitted || r.slot == nil {
			t.Fatalf("a at the release: %+v", r.out)
		}
		c := notify(context.Background(), "c")
		time.Sleep(time.Minute + time.Second) // fake time: c's budget runs out
		if r := <-c; r.out.Reason != ReasonTimeout {
			t.Fatalf("c after its budget: %+v", r.out)
		}
		d := notify(context.Background(), "d")
		q.Close()
		if r := <-d; r.out.Reason != ReasonClosed {
			t.Fatalf("d at Close: %+v", r.out)
		}
		r.slot.Release()

		// Admitted between Enqueue and Notify: told at once.
		q2, _ := New(Options{Limit: 1}, nil, nil)
		h2, _, _ := q2.Enqueue(context.Background(), Request{})
		_, _, w := q2.Enqueue(context.Background(), Request{ID: "e"})
		h2.Release()
		e := make(chan Outcome, 1)
		w.Notify(func(s *Slot, o Outcome) { e <- o; s.Release() })
		if o := <-e; !o.Admitted {
			t.Fatalf("e: %+v", o)
		}
		if st := q2.Stats(); st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("q2 not empty: %+v", st)
		}
	})
}
