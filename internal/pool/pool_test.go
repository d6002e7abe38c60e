package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeItem is a ready browser of fakeFiller's: the pool's decisions are
// what is under test here; the hub's tests and e2e start real ones.
type fakeItem struct {
	f         *fakeFiller
	n         int
	dead      bool
	stale     bool
	exited    chan struct{}
	discarded bool
}

func (it *fakeItem) Alive(context.Context) bool { return !it.dead }
func (it *fakeItem) Exited() <-chan struct{}    { return it.exited }
func (it *fakeItem) Stale() bool                { return it.stale }
func (it *fakeItem) Discard() {
	it.f.mu.Lock()
	defer it.f.mu.Unlock()
	if it.discarded {
		panic("discarded twice")
	}
	it.discarded = true
	it.f.slots--
}

// fakeFiller starts an item in startTime of fake time while fewer than limit
// slots are held; it counts slots as the queue would.
type fakeFiller struct {
	mu        sync.Mutex
	entries   map[Key]int
	limit     int
	slots     int
	startTime time.Duration
	fail      error
	fills     int
	items     []*fakeItem
}

func (f *fakeFiller) Fill(ctx context.Context, id string, k Key) (Item, error) {
	f.mu.Lock()
	if f.slots >= f.limit {
		f.mu.Unlock()
		return nil, ErrNoSpare
	}
	f.slots++
	f.fills++
	fail := f.fail
	f.mu.Unlock()
	t := time.NewTimer(f.startTime)
	defer t.Stop()
	select {
	case <-ctx.Done():
		fail = ctx.Err()
	case <-t.C:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fail != nil {
		f.slots--
		return nil, fail
	}
	it := &fakeItem{f: f, n: len(f.items), exited: make(chan struct{})}
	f.items = append(f.items, it)
	return it, nil
}

func (f *fakeFiller) Entries(size int) map[Key]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[Key]int{}
	for k, n := range f.entries {
		if n < 0 {
			n = size
		}
		out[k] = n
	}
	return out
}

func (f *fakeFiller) held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slots
}

var chrome = Key{"chrome", "1"}

func newPool(t *testing.T, o Options, f *fakeFiller) (*Pool, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p, err := New(o, f, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	t.Cleanup(p.Close)
	return p, reg
}

func hit(Item) Result { return Hit }

func readyOf(p *Pool, k Key) int {
	for _, s := range p.Stats() {
		if s.Browser == k.Browser && s.Version == k.Version {
			return s.Ready
		}
	}
	return 0
}

func TestFixedSizeFillsAndRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1, {"chrome", "0"}: 0}, limit: 5, startTime: 2 * time.Second}
		p, reg := newPool(t, Options{Size: 2}, f)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := readyOf(p, chrome); n != 2 {
			t.Fatalf("ready after fills = %d, want 2 (-warm-pool 2)", n)
		}
		if got := testutil.ToFloat64(prometheusGauge(t, reg, "websummoner_pool_ready")); got != 2 {
			t.Fatalf("websummoner_pool_ready = %v, want 2", got)
		}
		it, res := p.Claim(t.Context(), "1", chrome, hit)
		if it == nil || res != Hit {
			t.Fatalf("claim = %v %v, want a hit", it, res)
		}
		if n := readyOf(p, chrome); n != 1 {
			t.Fatalf("ready after a claim = %d, want 1", n)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := readyOf(p, chrome); n != 2 {
			t.Fatalf("ready after the refill = %d, want 2", n)
		}
		if it, _ := p.Claim(t.Context(), "2", Key{"chrome", "0"}, hit); it != nil {
			t.Fatal("a version with no pool handed out a browser")
		}
		if got := testutil.ToFloat64(p.m.claims.WithLabelValues("hit")); got != 1 {
			t.Fatalf("hits counted = %v, want 1", got)
		}
		if got := testutil.ToFloat64(p.m.claims.WithLabelValues("miss")); got != 1 {
			t.Fatalf("misses counted = %v, want 1", got)
		}
		// The claimed browser is the client's: the pool never discards it.
		if it.(*fakeItem).discarded {
			t.Fatal("a claimed browser was discarded by the pool")
		}
	})
}

// prometheusGauge gathers one metric family's first sample as a collector.
func prometheusGauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no %s sample", name)
	return nil
}

func TestDeadBrowserIsNeverHandedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1}, limit: 5, startTime: time.Second}
		p, _ := newPool(t, Options{Size: 2}, f)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		// The two starts finish at the same instant, in either order: the
		// one Claim will look at first is the one that dies.
		p.mu.Lock()
		s := p.stockLocked(chrome)
		if len(s.ready) != 2 {
			p.mu.Unlock()
			t.Fatalf("ready = %d, want 2", len(s.ready))
		}
		first, second := s.ready[0].item.(*fakeItem), s.ready[1].item.(*fakeItem)
		p.mu.Unlock()
		f.mu.Lock()
		first.dead = true // killed while it waited: no answer
		f.mu.Unlock()
		it, res := p.Claim(t.Context(), "1", chrome, hit)
		if it != second || res != Hit {
			t.Fatalf("claim = %v %v, want the live browser", it, res)
		}
		if !first.discarded {
			t.Fatal("the dead browser was not discarded")
		}
		if got := testutil.ToFloat64(p.m.discarded.WithLabelValues(ReasonDead)); got != 1 {
			t.Fatalf("dead discards = %v, want 1", got)
		}
		// One that exits while it waits goes at the next look.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		f.mu.Lock()
		third := f.items[len(f.items)-1]
		close(third.exited)
		f.mu.Unlock()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !third.discarded {
			t.Fatal("a browser that exited was kept")
		}
	})
}

func TestAgedAndStaleAreReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1}, limit: 5, startTime: time.Second}
		p, _ := newPool(t, Options{Size: 1, MaxAge: time.Minute}, f)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		f.mu.Lock()
		first := f.items[0]
		f.mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		if !first.discarded {
			t.Fatal("a browser older than -warm-pool-max-age was kept")
		}
		if n := readyOf(p, chrome); n != 1 {
			t.Fatalf("ready after the replacement = %d, want 1", n)
		}
		f.mu.Lock()
		second := f.items[len(f.items)-1]
		second.stale = true // browsers.json changed its entry
		f.mu.Unlock()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !second.discarded {
			t.Fatal("a browser of a changed entry was kept")
		}
		if got := testutil.ToFloat64(p.m.discarded.WithLabelValues(ReasonAged)); got != 1 {
			t.Fatalf("aged discards = %v, want 1", got)
		}
	})
}

func TestEvictFreesASlotAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1}, limit: 2, startTime: time.Second}
		p, _ := newPool(t, Options{Size: 2}, f)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if f.held() != 2 {
			t.Fatalf("slots held = %d, want 2", f.held())
		}
		if !p.Evict("9") {
			t.Fatal("Evict found nothing with two ready")
		}
		if f.held() != 1 {
			t.Fatalf("slots held after an eviction = %d, want 1", f.held())
		}
		// A fill under way is cancelled when nothing is ready.
		p.Evict("10")
		f.mu.Lock()
		f.startTime = time.Hour
		f.mu.Unlock()
		time.Sleep(2 * time.Second) // a look starts two fills, held for an hour
		synctest.Wait()
		if f.held() != 2 {
			t.Fatalf("slots held by fills = %d, want 2", f.held())
		}
		if !p.Evict("11") {
			t.Fatal("Evict did not cancel a fill")
		}
		synctest.Wait()
		if f.held() != 1 {
			t.Fatalf("slots held after cancelling a fill = %d, want 1", f.held())
		}
	})
}

func TestAdaptiveFollowsArrivals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: 0}, limit: 10, startTime: 2 * time.Second}
		p, _ := newPool(t, Options{Adaptive: true, Window: time.Minute}, f)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if f.fills != 0 {
			t.Fatalf("adaptive pool started %d browsers with no request", f.fills)
		}
		// A request every 5s: 0.2/s × 2s start = 0.4 refills under way on
		// average; 3 ready leave a request without one < 1 % of the time.
		for range 24 {
			if it, _ := p.Claim(t.Context(), "r", chrome, hit); it != nil {
				it.Discard() // the session ends: its browser and slot go
			}
			time.Sleep(5 * time.Second)
		}
		synctest.Wait()
		if n := readyOf(p, chrome); n != 3 {
			t.Fatalf("ready under 0.2 requests/s = %d, want 3 (%+v, fills %d)", n, p.Stats(), f.fills)
		}
		time.Sleep(2 * time.Minute) // nothing arrives: the pool empties
		synctest.Wait()
		if n := readyOf(p, chrome); n != 0 || f.held() != 0 {
			t.Fatalf("ready after two quiet minutes = %d (slots %d), want 0", n, f.held())
		}
		hits := testutil.ToFloat64(p.m.claims.WithLabelValues("hit"))
		if hits < 22 {
			t.Fatalf("hits = %v of 24 requests, want at least 22 (only the first finds nothing)", hits)
		}
	})
}

func TestFailingEntryBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1}, limit: 5, startTime: 100 * time.Millisecond, fail: errors.New("image missing")}
		newPool(t, Options{Size: 1}, f)
		time.Sleep(time.Minute)
		synctest.Wait()
		// Tries at 0, 5, 15, 35 s (+ start times): not one a second.
		if f.fills < 3 || f.fills > 5 {
			t.Fatalf("fills of a failing entry in a minute = %d, want 3 to 5 (backing off)", f.fills)
		}
		if f.held() != 0 {
			t.Fatalf("failed fills hold %d slots", f.held())
		}
	})
}

func TestCloseDiscardsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1}, limit: 5, startTime: time.Second}
		p, _ := newPool(t, Options{Size: 3, MaxFilling: 3}, f)
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		f.mu.Lock()
		f.startTime = time.Hour
		f.mu.Unlock()
		p.Claim(t.Context(), "1", chrome, hit) // one taken; a fill of an hour starts
		time.Sleep(2 * time.Second)
		synctest.Wait()
		p.Close()
		if f.held() != 1 {
			t.Fatalf("slots held after Close = %d, want 1 (the claimed browser's)", f.held())
		}
		if it, _ := p.Claim(t.Context(), "2", chrome, hit); it != nil {
			t.Fatal("a closed pool handed out a browser")
		}
	})
}

func TestNearAndMissClassification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1}, limit: 5, startTime: time.Second}
		p, _ := newPool(t, Options{Size: 1}, f)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if it, res := p.Claim(t.Context(), "1", chrome, func(Item) Result { return Miss }); it != nil || res != Miss {
			t.Fatalf("claim the classifier refused = %v %v", it, res)
		}
		if n := readyOf(p, chrome); n != 1 {
			t.Fatalf("a refused browser was not kept: ready = %d", n)
		}
		if it, res := p.Claim(t.Context(), "2", chrome, func(Item) Result { return Near }); it == nil || res != Near {
			t.Fatalf("near claim = %v %v", it, res)
		}
		if got := testutil.ToFloat64(p.m.claims.WithLabelValues("near")); got != 1 {
			t.Fatalf("near counted = %v", got)
		}
	})
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Options{"off": {}, "": {}, "0": {}, "adaptive": {Adaptive: true}, "3": {Size: 3}} {
		n, a, err := ParseMode(in)
		if err != nil || n != want.Size || a != want.Adaptive {
			t.Errorf("ParseMode(%q) = %d %v %v, want %+v", in, n, a, err, want)
		}
	}
	for _, in := range []string{"-1", "many", "1001"} {
		if _, _, err := ParseMode(in); err == nil {
			t.Errorf("ParseMode(%q) accepted", in)
		}
	}
}

// A pool not started holds nothing: a build that will not serve starts no
// browser.
func TestNothingBeforeStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1}, limit: 5, startTime: time.Second}
		p, err := New(Options{Size: 2}, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if f.fills != 0 {
			t.Fatalf("%d fills before Start", f.fills)
		}
		p.Close()
		p.Start() // after Close: still nothing
		time.Sleep(time.Minute)
		synctest.Wait()
		if f.fills != 0 {
			t.Fatalf("%d fills after Close", f.fills)
		}
	})
}

// The adaptive size: the least n that the refills under way (a Poisson
// number of mean rate × start) reach at most 1 % of the time.
func TestBaseStock(t *testing.T) {
	for _, c := range []struct {
		mean float64
		want int
	}{
		{0, 1},    // nothing starts: one, so that a lone request finds one
		{0.05, 2}, // P(≥1) = 4.9 %, P(≥2) = 0.1 %
		{0.4, 3},  // P(≥2) = 6.2 %, P(≥3) = 0.8 %
		{0.8, 4},  // 0.4 requests/s × 2 s: P(≥3) = 4.7 %, P(≥4) = 0.9 %
		{2, 7},    // P(≥6) = 1.7 %, P(≥7) = 0.5 %
		{10, 19},  // P(≥18) = 1.4 %, P(≥19) = 0.7 %
		{400, 448},
	} {
		if got := baseStock(c.mean, missShare); got != c.want {
			t.Errorf("baseStock(%v) = %d, want %d", c.mean, got, c.want)
		}
	}
}

// A fill refused for want of a slot (a session's teardown still holds it)
// is tried again within a fraction of a second, not at the next look a
// second later: a pool short of a browser misses every request meanwhile.
func TestRefusedFillIsRetriedSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: -1}, limit: 1, slots: 1, startTime: 2 * time.Second}
		p, _ := newPool(t, Options{Size: 1}, f)
		synctest.Wait() // the first look: refused, every slot is held
		time.Sleep(250 * time.Millisecond)
		f.mu.Lock()
		f.slots-- // the teardown ends: the slot is free
		f.mu.Unlock()
		time.Sleep(2*time.Second + 200*time.Millisecond)
		synctest.Wait()
		if n := readyOf(p, chrome); n != 1 {
			t.Fatalf("ready 2.2 s after the slot was freed = %d, want 1 (a fill started within 0.2 s of it)", n)
		}
	})
}

// Slowly coming and going arrivals move an adaptive pool's target by one
// now and then: a ready browser over the target is kept for the next
// request, not thrown away and started again; one that waits a whole window
// unclaimed goes.
func TestAdaptiveSurplusIsKeptForTheNextRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFiller{entries: map[Key]int{chrome: 0}, limit: 10, startTime: 2 * time.Second}
		p, _ := newPool(t, Options{Adaptive: true, Window: time.Minute}, f)
		// 0.5 requests/s for a minute: 1 refill under way on average, 5 ready.
		for range 30 {
			if it, _ := p.Claim(t.Context(), "r", chrome, hit); it != nil {
				it.Discard()
			}
			time.Sleep(2 * time.Second)
		}
		synctest.Wait()
		if n := readyOf(p, chrome); n != 5 {
			t.Fatalf("ready under 0.5 requests/s = %d, want 5", n)
		}
		// Then one every 10 s: the target falls to 3 within the minute.
		for range 5 {
			if it, _ := p.Claim(t.Context(), "r", chrome, hit); it != nil {
				it.Discard()
			}
			time.Sleep(10 * time.Second)
		}
		synctest.Wait()
		if got := testutil.ToFloat64(p.m.discarded.WithLabelValues(ReasonSurplus)); got != 0 {
			t.Fatalf("surplus discards while requests arrive = %v, want 0", got)
		}
		if st := p.Stats(); st[0].Target >= st[0].Ready {
			t.Fatalf("%+v: the test wants more ready than the target", st)
		}
		// Nobody asks for a minute more: those over the target have
		// waited a window, and then the target is 0.
		time.Sleep(70 * time.Second)
		synctest.Wait()
		if n := readyOf(p, chrome); n != 0 || f.held() != 0 {
			t.Fatalf("ready after a quiet minute = %d (slots %d), want 0", n, f.held())
		}
	})
}
