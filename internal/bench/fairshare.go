package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/websummoner/websummoner/internal/queue"
)

// tenantHeader names the fair-share scenario's tenants: a trusted front's
// header (-tenant-header), so no password hashing weighs on the figures.
const tenantHeader = "X-Wsbench-Tenant"

// FairShare is the fair-share scenario (-quotas): a tenant that arrives
// behind another's flood of 30× the slots, how long it waits for its first
// session; two tenants of weights 1:2 both saturating, their share of the
// starts; and the queue's cost per waiting request and its hand-off at
// 10,000 waiters, one tenant against ten. Stub drivers.
func (e *Env) FairShare(ctx context.Context) (*Result, error) {
	r := &Result{Scenario: "fairshare", Figures: map[string]float64{},
		Header: []string{"measure", "value", "note"}}
	limit, hold := 4, 2*time.Second
	weighFor := 60 * time.Second
	if e.Short {
		hold, weighFor = 500*time.Millisecond, 8*time.Second
	}
	quotas := filepath.Join(e.Dir, "quotas.json")
	if err := os.WriteFile(quotas, []byte(`{"nightly": {"weight": 1}, "alice": {"weight": 1}, "a": {"weight": 1}, "b": {"weight": 2}}`), 0o644); err != nil {
		return nil, err
	}
	h, err := e.startHub(ctx, e.stubBrowsers(), "-limit", fmt.Sprint(limit), "-quotas", quotas, "-tenant-header", tenantHeader, "-start-gate", "off")
	if err != nil {
		return nil, err
	}
	defer h.stop()
	c := pooled(400)
	bad := atomic.Int64{}

	// A session's start and teardown on the idle hub: the latecomer's wait is
	// the rest of a session, its teardown (the slot is held until the
	// browser has stopped), and its own start.
	t0 := time.Now()
	if !tenantSession(ctx, c, h.url, "alice", 0, &bad) {
		bad.Add(1)
	}
	waitStatus(ctx, c, h.url, func(st map[string]any) bool { return st["used"] == 0.0 })
	start := time.Since(t0)

	// The flood: 30× the slots from one tenant, each session held for hold.
	floodCtx, stopFlood := context.WithCancel(ctx)
	var flood sync.WaitGroup
	for range 30 * limit {
		flood.Go(func() { tenantSession(floodCtx, c, h.url, "nightly", hold, &bad) })
	}
	waitStatus(ctx, c, h.url, func(st map[string]any) bool { v, _ := st["queued"].(float64); return v >= float64(29*limit) })
	t0 = time.Now()
	if !tenantSession(ctx, c, h.url, "alice", 0, &bad) {
		bad.Add(1)
	}
	lateWait := time.Since(t0)
	stopFlood()
	flood.Wait()
	waitStatus(ctx, c, h.url, func(st map[string]any) bool { return st["used"] == 0.0 && st["queued"] == 0.0 })
	fifo := time.Duration(30) * hold // the flood's 30 rounds of limit sessions, ahead of a FIFO latecomer
	r.Figures["latecomer_wait_s"] = lateWait.Seconds()
	r.Figures["session_s"] = hold.Seconds()
	r.Rows = append(r.Rows, []string{"latecomer's wait behind a flood of 30× the slots", fmt.Sprintf("%.2f s", lateWait.Seconds()),
		fmt.Sprintf("sessions of %v; first in, first out it would be ~%v", hold, fifo)})
	r.Figures["idle_start_s"] = start.Seconds()
	r.target("latecomer's wait over one session length (with a start and a teardown)", lateWait.Seconds()/(hold+start).Seconds(), 1, "×")

	// Weights 1:2, both tenants saturating: 3× the slots each, closed loops.
	weighCtx, stopWeigh := context.WithCancel(ctx)
	starts := map[string]*atomic.Int64{"a": {}, "b": {}}
	counting := atomic.Bool{}
	var weigh sync.WaitGroup
	for _, t := range []string{"a", "b"} {
		for range 3 * limit {
			weigh.Go(func() {
				for weighCtx.Err() == nil {
					if tenantSession(weighCtx, c, h.url, t, hold/2, &bad) && counting.Load() {
						starts[t].Add(1)
					}
				}
			})
		}
	}
	time.Sleep(hold) // the first round is a burst, not the share
	counting.Store(true)
	select {
	case <-ctx.Done():
	case <-time.After(weighFor):
	}
	counting.Store(false)
	stopWeigh()
	weigh.Wait()
	a, b := starts["a"].Load(), starts["b"].Load()
	ratio := float64(b) / float64(max(a, 1))
	r.Figures["weighted_starts_a"], r.Figures["weighted_starts_b"], r.Figures["weighted_ratio"] = float64(a), float64(b), ratio
	r.Rows = append(r.Rows, []string{"starts, weights 1:2, both saturating", fmt.Sprintf("%d : %d (%.2f)", a, b, ratio), fmt.Sprintf("over %v", weighFor)})
	r.target("weighted share's distance from 1:2", abs(ratio-2)/2, 0.10, "")

	// The queue alone, in this process: 10,000 waiters of one tenant, then
	// of ten, with the quotas in force.
	one, ten, err := queueCosts(10000, 1000)
	if err != nil {
		return nil, err
	}
	for _, q := range []struct {
		name string
		c    queueCostResult
	}{{"one tenant", one}, {"ten tenants", ten}} {
		r.Rows = append(r.Rows, []string{"10,000 waiters, " + q.name, fmt.Sprintf("%.0f B/waiter, hand-off p50 %.1f µs, p99 %.1f µs", q.c.bytes, q.c.p50us, q.c.p99us), "the queue's own share (no HTTP)"})
	}
	r.Figures["waiter_bytes_one"], r.Figures["waiter_bytes_ten"] = one.bytes, ten.bytes
	r.Figures["handoff_p50_us_one"], r.Figures["handoff_p50_us_ten"] = one.p50us, ten.p50us
	r.target("bytes per waiter, ten tenants over one", ten.bytes/one.bytes, 1.10, "×")
	r.target("hand-off p50, ten tenants over one", ten.p50us/one.p50us, 1.10, "×")

	r.correct("requests answered other than 200 or cancelled", float64(bad.Load()), 0, "")
	st := statusOf(c, h.url)
	left, _ := st["used"].(float64)
	r.correct("slots held at the end", left, 0, "")
	r.Notes = append(r.Notes, "tenants by -tenant-header; stub drivers; -start-gate off so the order is the queue's alone")
	return r, nil
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// tenantSession creates a session for tenant, holds it, and deletes it. It
// reports whether a session was made; an answer other than 200 (or a
// request cut by ctx) is counted in bad.
func tenantSession(ctx context.Context, c *http.Client, base, tenant string, hold time.Duration, bad *atomic.Int64) bool {
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/session", strings.NewReader(stubCaps))
	req.Header.Set(tenantHeader, tenant)
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			bad.Add(1)
		}
		return false
	}
	var out struct {
		Value struct {
			SessionID string `json:"sessionId"`
		} `json:"value"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || out.Value.SessionID == "" {
		bad.Add(1)
		return false
	}
	if hold > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
	}
	wd{c}.remove(base, out.Value.SessionID)
	return true
}

func statusOf(c *http.Client, base string) map[string]any {
	resp, err := c.Get(base + "/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st
}

// waitStatus polls /status until cond holds or ctx ends (a minute at most):
// the load tool's view of the hub, which logs nothing it could wait on.
func waitStatus(ctx context.Context, c *http.Client, base string, cond func(map[string]any) bool) {
	deadline := time.Now().Add(time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if st := statusOf(c, base); st != nil && cond(st) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type queueCostResult struct{ bytes, p50us, p99us float64 }

// queueCosts fills two queues of one slot with n waiters each — one tenant's,
// and ten tenants' (quotas naming them, weight 1) — measuring the heap and
// stacks each's waiters hold, then times handoffs hand-offs of each (a
// release to the next waiter's admission), alternating between the two so
// that the machine's drift weighs on both alike.
func queueCosts(n, handoffs int) (one, ten queueCostResult, err error) {
	a, err := newCostQueue(1, n)
	if err != nil {
		return one, ten, err
	}
	defer a.close()
	b, err := newCostQueue(10, n)
	if err != nil {
		return one, ten, err
	}
	defer b.close()
	var la, lb []time.Duration
	for range handoffs {
		la = append(la, a.handOff())
		lb = append(lb, b.handOff())
	}
	sum := func(q *costQueue, lat []time.Duration) queueCostResult {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return queueCostResult{bytes: q.bytes, p50us: float64(lat[len(lat)/2]) / 1e3, p99us: float64(lat[len(lat)*99/100]) / 1e3}
	}
	return sum(a, la), sum(b, lb), nil
}

// costQueue is a queue of one slot with n waiters parked in Acquire.
type costQueue struct {
	q        *queue.Queue
	cur      *queue.Slot
	admitted chan *queue.Slot
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	bytes    float64
}

func newCostQueue(tenants, n int) (*costQueue, error) {
	names := make([]string, tenants)
	doc := map[string]queue.Quota{}
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
		doc[names[i]] = queue.Quota{Weight: 1}
	}
	data, _ := json.Marshal(doc)
	qs, err := queue.ParseQuotas(data)
	if err != nil {
		return nil, err
	}
	q, err := queue.New(queue.Options{Limit: 1, Timeout: time.Hour, Quotas: qs}, nil, nil)
	if err != nil {
		return nil, err
	}
	c := &costQueue{q: q, admitted: make(chan *queue.Slot, 1)}
	c.cur, _ = q.Acquire(context.Background(), queue.Request{Tenant: names[0]})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	for i := range n {
		c.wg.Go(func() {
			if s, out := q.Acquire(ctx, queue.Request{Tenant: names[i%tenants]}); out.Admitted {
				c.admitted <- s
			}
		})
	}
	for q.Stats().Waiting < n {
		runtime.Gosched()
	}
	runtime.ReadMemStats(&after)
	c.bytes = float64(after.HeapAlloc+after.StackInuse-before.HeapAlloc-before.StackInuse) / float64(n)
	return c, nil
}

// handOff releases the slot held and waits for the waiter it goes to.
func (c *costQueue) handOff() time.Duration {
	t0 := time.Now()
	c.cur.Release()
	c.cur = <-c.admitted
	return time.Since(t0)
}

func (c *costQueue) close() {
	c.cancel()
	c.cur.Release()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-c.admitted:
				s.Release()
			case <-done:
				return
			}
		}
	}()
	c.wg.Wait()
	close(done)
}
