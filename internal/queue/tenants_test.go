package queue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// acquireAs is harness.acquire for a tenant's request.
func (h *harness) acquireAs(tenant, id string) *pending {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pending{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(p.done)
		p.slot, p.out = h.q.Acquire(ctx, Request{ID: id, Tenant: tenant})
	}()
	synctest.Wait()
	return p
}

// settle ends every request of ps: a slot it got is released, a wait is
// given up.
func settle(ps []*pending) {
	for _, p := range ps {
		if p.finished() && p.slot != nil {
			p.slot.Release()
		} else {
			p.cancel()
		}
	}
	synctest.Wait()
}

func mustQuotas(t *testing.T, doc string) *Quotas {
	t.Helper()
	q, err := ParseQuotas([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// A latecomer behind another tenant's flood takes the next free slot: FIFO
// would make it wait for the whole flood.
func TestLatecomerBehindAFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 2})
		var flood []*pending
		for i := range 20 {
			flood = append(flood, h.acquireAs("nightly", fmt.Sprint("n", i)))
		}
		late := h.acquireAs("alice", "a")
		if late.finished() {
			t.Fatal("the latecomer was admitted with every slot busy")
		}
		flood[0].slot.Release()
		synctest.Wait()
		if !late.finished() || !late.out.Admitted {
			t.Fatal("the first free slot went to the flood, not to the tenant with no session")
		}
		if flood[2].finished() {
			t.Fatal("the flood got a slot the latecomer took")
		}
		if got := h.metric("websummoner_tenant_sessions", "tenant", "other"); got != 2 {
			t.Fatalf("tenant_sessions{other} = %v, want 2", got)
		}
		late.slot.Release()
		synctest.Wait()
		if !flood[2].finished() {
			t.Fatal("with the latecomer gone, the flood is first in, first out")
		}
		settle(flood)
	})
}

// Starts nobody contested are no debt: a tenant that ran many sessions one
// after another while nobody waited is not put behind a flood that came
// later.
func TestUncontestedStartsAreNoDebt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 2})
		held := h.acquireAs("bob", "held")
		for i := range 30 {
			p := h.acquireAs("bob", fmt.Sprint("b", i))
			if !p.finished() || !p.out.Admitted {
				t.Fatalf("bob's start %d waited on a free slot", i)
			}
			p.slot.Release()
			synctest.Wait()
		}
		var flood []*pending
		for i := range 15 {
			flood = append(flood, h.acquireAs("flood", fmt.Sprint("f", i)))
		}
		if !flood[0].finished() || flood[1].finished() {
			t.Fatal("the flood's first request should take the free slot, the rest wait")
		}
		flood[0].slot.Release()
		synctest.Wait()
		late := h.acquireAs("bob", "late")
		// Bob holds one of the two slots: the next start is the flood's
		// (equal virtual times, and it runs none), the one after it bob's.
		for i := 1; i <= 2 && !late.finished(); i++ {
			flood[i].slot.Release()
			synctest.Wait()
		}
		if !late.finished() || !late.out.Admitted {
			t.Fatal("bob's request waited behind the flood: his uncontested starts counted against him")
		}
		if flood[3].finished() {
			t.Fatal("the flood got the slot bob took")
		}
		late.slot.Release()
		held.slot.Release()
		settle(flood)
	})
}

// releaseFirst releases the slot of the first of ps that holds one, and
// lets the hand-off happen.
func releaseFirst(ps []*pending) {
	for _, p := range ps {
		if p.finished() && p.slot != nil {
			p.slot.Release()
			p.slot = nil
			synctest.Wait()
			return
		}
	}
	panic("no request holds a slot")
}

// A tenant held at its maxSessions does not hold the system's virtual time
// back: its own stands still while it may not start, and a newcomer joining
// there would take every start ahead of the tenant sharing the slots.
func TestCappedWaiterIsNotTheSystemsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 3, Quotas: mustQuotas(t, `{"capped": {"maxSessions": 1}, "busy": {}, "late": {}}`)})
		first := h.acquireAs("capped", "c0")
		stuck := h.acquireAs("capped", "c1") // waits for its own tenant's session
		var busy []*pending
		for i := range 20 {
			busy = append(busy, h.acquireAs("busy", fmt.Sprint("b", i)))
		}
		// Busy alone shares the two other slots for a while: its virtual
		// time runs on, capped's stands still.
		for range 10 {
			releaseFirst(busy)
		}
		var late []*pending
		for i := range 5 {
			late = append(late, h.acquireAs("late", fmt.Sprint("l", i)))
		}
		count := func(ps []*pending) (n int) {
			for _, p := range ps {
				if p.finished() {
					n++
				}
			}
			return n
		}
		lateBefore, busyBefore := count(late), count(busy)
		for range 4 {
			releaseFirst(append(append([]*pending{}, busy...), late...))
		}
		lateStarts, busyStarts := count(late)-lateBefore, count(busy)-busyBefore
		if lateStarts != 2 || busyStarts != 2 {
			t.Fatalf("of 4 starts the newcomer took %d and busy %d, want 2 each: the newcomer joined at the capped tenant's virtual time", lateStarts, busyStarts)
		}
		if stuck.finished() {
			t.Fatal("the capped tenant started past its maxSessions")
		}
		first.slot.Release()
		synctest.Wait()
		if !stuck.finished() || !stuck.out.Admitted {
			t.Fatal("the capped tenant's waiter did not take its own tenant's freed slot")
		}
		settle(append(append([]*pending{stuck}, busy...), late...))
	})
}

// Under saturation, weights 1:2 share the starts 1:2, also where -limit
// does not divide by the weights.
func TestWeightsShareStarts(t *testing.T) {
	for _, limit := range []int{6, 4, 5} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) { weightsShareStarts(t, limit) })
	}
}

func weightsShareStarts(t *testing.T, limit int) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: limit, Quotas: mustQuotas(t, `{"a": {"weight": 1}, "b": {"weight": 2}}`)})
		var held []*pending
		starts := map[string]int{}
		waiting := map[string][]*pending{}
		refill := func(tenant string) {
			for len(waiting[tenant]) < 10 {
				waiting[tenant] = append(waiting[tenant], h.acquireAs(tenant, tenant))
			}
		}
		collect := func() {
			for _, tenant := range []string{"a", "b"} {
				var still []*pending
				for _, p := range waiting[tenant] {
					if p.finished() {
						held = append(held, p)
						starts[tenant]++
					} else {
						still = append(still, p)
					}
				}
				waiting[tenant] = still
				refill(tenant)
			}
		}
		refill("a")
		refill("b")
		collect()
		starts = map[string]int{}
		for range 300 { // sessions end oldest first; each free slot is handed on
			held[0].slot.Release()
			held = held[1:]
			synctest.Wait()
			collect()
		}
		ratio := float64(starts["b"]) / float64(starts["a"])
		if ratio < 1.8 || ratio > 2.2 {
			t.Fatalf("starts a:b = %d:%d (b/a %.2f), want 1:2 within ±10%%", starts["a"], starts["b"], ratio)
		}
		for _, p := range held {
			p.slot.Release()
		}
		for _, ps := range waiting {
			for _, p := range ps {
				p.cancel()
			}
		}
		synctest.Wait()
	})
}

// A tenant at maxSessions waits and takes no free slot; another tenant's
// request takes it at once. A reload that lifts the bound admits the waiter.
func TestMaxSessionsAndReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 3, Quotas: mustQuotas(t, `{"a": {"maxSessions": 1}}`)})
		a1 := h.acquireAs("a", "a1")
		a2 := h.acquireAs("a", "a2")
		if !a1.finished() || a2.finished() {
			t.Fatal("a tenant at maxSessions 1 was given a second slot")
		}
		b := h.acquireAs("b", "b1")
		if !b.finished() || !b.out.Admitted {
			t.Fatal("a free slot was held back from another tenant behind a waiting one at its maxSessions")
		}
		if h.q.MayStart("a") || !h.q.MayStart("b") {
			t.Fatal("MayStart disagrees with maxSessions")
		}
		// A warm browser's slot handed to a tenant at its maxSessions (another
		// of its requests counted since it asked MayStart) is refused, and
		// the slot stays no one's.
		h.q.SetQuotas(mustQuotas(t, `{"a": {"maxSessions": 1}, "b": {"maxSessions": 1}}`))
		if spare := h.q.Spare(1, ""); spare == nil || spare.Assign("a") || spare.Assign("b") {
			t.Fatal("a spare slot was handed to a tenant at its maxSessions")
		} else {
			spare.Release()
		}
		for _, ts := range h.q.Tenants() {
			if ts.Sessions > 1 {
				t.Fatalf("tenant %q holds %d sessions at maxSessions 1", ts.Tenant, ts.Sessions)
			}
		}
		h.q.SetQuotas(mustQuotas(t, `{"a": {"maxSessions": 2}}`))
		synctest.Wait()
		if !a2.finished() || !a2.out.Admitted {
			t.Fatal("a reload that raised maxSessions left the waiter waiting by a free slot")
		}
		for _, p := range []*pending{a1, a2, b} {
			p.slot.Release()
		}
		if st := h.q.Stats(); st.InUse != 0 || len(h.q.Tenants()) != 1 { // "a" is named in the quotas
			t.Fatalf("after every release: %+v %+v", st, h.q.Tenants())
		}
	})
}

// Waiters of a tenant at its maxSessions that fill -queue-max (or
// -queue-max-bytes) keep no other tenant from a free slot; the tenant's own
// next request is refused for what holds it: its maxSessions, not busy slots.
func TestWaitersAtMaxSessionsKeepNoSlotFromOthers(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"count", Options{Limit: 4, MaxWaiting: 2}},
		{"bytes", Options{Limit: 4, MaxWaitingBytes: 5 << 20}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c.opts.Quotas = mustQuotas(t, `{"bob": {"maxSessions": 1}}`)
				h := newHarness(t, c.opts)
				req := func(tenant, id string) *pending {
					return h.acquireReq(Request{ID: id, Tenant: tenant, Bytes: 3 << 20})
				}
				b0 := req("bob", "b0")
				b1, b2 := req("bob", "b1"), req("bob", "b2")
				if !b0.finished() || b1.finished() {
					t.Fatal("bob was given more than his maxSessions")
				}
				a := req("alice", "a")
				if !a.finished() || !a.out.Admitted {
					t.Fatalf("alice was refused a free slot behind bob's waiters at his maxSessions: %s", a.out.Message())
				}
				if c.name == "count" {
					if b3 := req("bob", "b3"); !b3.finished() || b3.out.Reason != ReasonFull ||
						!strings.Contains(b3.out.Message(), `"bob" already runs its maxSessions of 1`) {
						t.Fatalf("bob's request past -queue-max: %v %q", b3.out.Reason, b3.out.Message())
					}
				} else if !b2.finished() || !strings.Contains(b2.out.Message(), `"bob" already runs its maxSessions of 1`) {
					t.Fatalf("bob's request past -queue-max-bytes: %v %q", b2.out.Reason, b2.out.Message())
				}
				for _, p := range []*pending{b0, a} {
					p.slot.Release()
				}
				synctest.Wait()
				for _, p := range []*pending{b1, b2} {
					if p.finished() && p.slot != nil {
						p.slot.Release()
					} else {
						p.cancel()
					}
				}
				synctest.Wait()
				if st := h.q.Stats(); st.InUse != 0 || st.Waiting != 0 {
					t.Fatalf("after every release: %+v", st)
				}
			})
		})
	}
}

// Starved counts, of each waiting tenant, the waiters its maxSessions lets
// run: a reload that raises team-a's 1 to 3 while it runs 1 and 10 wait
// frees 2 ready browsers' slots, not 10.
func TestStarvedCountsWhatMayRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 4, Quotas: mustQuotas(t, `{"a": {"maxSessions": 1}}`)})
		a0 := h.acquireAs("a", "a0")
		var spares []*Slot
		for range 3 {
			spares = append(spares, h.q.Spare(1, "")) // the warm pool's ready browsers
		}
		var waiting []*pending
		for i := range 10 {
			waiting = append(waiting, h.acquireAs("a", fmt.Sprint("a", i+1)))
		}
		if n := h.q.Starved(); n != 0 {
			t.Fatalf("Starved at maxSessions 1 = %d, want 0", n)
		}
		h.q.SetQuotas(mustQuotas(t, `{"a": {"maxSessions": 3}}`))
		if n := h.q.Starved(); n != 2 {
			t.Fatalf("Starved after raising maxSessions to 3 with 1 running = %d, want 2", n)
		}
		h.q.SetQuotas(mustQuotas(t, `{}`))
		if n := h.q.Starved(); n != 10 {
			t.Fatalf("Starved without a maxSessions = %d, want 10", n)
		}
		for _, p := range waiting {
			p.cancel()
		}
		synctest.Wait()
		for _, s := range spares {
			s.Release()
		}
		a0.slot.Release()
	})
}

// A request past its tenant's maxQueued is refused at once: 429's reason
// quota, with Retry-After, counted and logged; other tenants still queue.
func TestMaxQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 1, Timeout: time.Minute, Quotas: mustQuotas(t, `{"*": {"maxQueued": 2}}`)})
		held := h.acquireAs("x", "x0")
		w1, w2 := h.acquireAs("a", "a1"), h.acquireAs("a", "a2")
		over := h.acquireAs("a", "a3")
		if !over.finished() || over.out.Reason != ReasonQuota || over.out.RetryAfter < time.Second {
			t.Fatalf("the third waiting request of a tenant with maxQueued 2: %+v", over.out)
		}
		if msg := over.out.Message(); !strings.Contains(msg, `"a"`) || !strings.Contains(msg, "maxQueued") {
			t.Fatalf("the refusal does not name the tenant and the quota: %q", msg)
		}
		if !strings.Contains(h.logs.take(), "[QUEUE_QUOTA]") || h.metric("websummoner_queue_rejected_total", "reason", "quota") != 1 {
			t.Fatal("a quota refusal not logged as [QUEUE_QUOTA] or not counted")
		}
		other := h.acquireAs("b", "b1")
		if other.finished() {
			t.Fatal("another tenant's request was refused for a's quota")
		}
		for _, p := range []*pending{w1, w2, other} {
			p.cancel()
		}
		held.slot.Release()
		synctest.Wait()
	})
}

func TestParseQuotas(t *testing.T) {
	q := mustQuotas(t, `{"alice": {"weight": 2, "maxSessions": 10, "maxQueued": 50}, "*": {"weight": 1}}`)
	if a := q.Of("alice"); a.Weight != 2 || a.MaxSessions != 10 || a.MaxQueued != 50 {
		t.Fatalf("alice: %+v", a)
	}
	if o := q.Of("bob"); o.Weight != 1 || o.MaxSessions != 0 {
		t.Fatalf("bob (by *): %+v", o)
	}
	if !q.Named("alice") || q.Named("bob") || q.Named("*") {
		t.Fatal("Named")
	}
	if n := mustQuotas(t, `{"a": null}`).Of("a"); n.Weight != 1 || n.MaxSessions != 0 {
		t.Fatalf("a tenant set to null: %+v, want the defaults", n)
	}
	var nilQ *Quotas
	if nilQ.Of("x").Weight != 1 {
		t.Fatal("nil quotas: weight 1")
	}
	for _, bad := range []string{`[]`, `{"a": {"weight": -1}}`, `{"a": {"maxSessions": -2}}`, `{"a": {"maxQueued": -1}}`, `{"a": {"wieght": 2}}`, `{"": {}}`,
		// A repeat (Go's JSON keeps the last), a field in other capitals
		// (Go's JSON matches any case) and the metrics' bucket's name.
		`{"x": {"weight": -1}, "x": {"weight": 2}}`, `{"x": {"WEIGHT": 2}}`, `{"x": {"weight": 2, "weight": 3}}`, `{"other": {"maxSessions": 5}}`,
		`{"a": {}} {}`, `{"a": []}`, `{"a": {"weight": "2"}}`} {
		if _, err := ParseQuotas([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// A request that may not wait (ggr's X-Selenoid-No-Wait) while the start
// gate is full waits for its start's turn by a free slot: a waiter of a
// tenant at its maxSessions is promised no slot, so it is not "ahead".
func TestNoWaitNotBehindWaitersAtMaxSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{permits: 1}
		h := newHarness(t, Options{Limit: 2, Timeout: time.Minute, Gate: g, TurnTimeout: 30 * time.Second,
			Quotas: mustQuotas(t, `{"bob": {"maxSessions": 1}}`)})
		b0 := h.acquireReq(Request{ID: "b0", Tenant: "bob"})
		b1 := h.acquireReq(Request{ID: "b1", Tenant: "bob"})
		if !b0.finished() || b1.finished() {
			t.Fatal("bob was given more than his maxSessions")
		}
		a := h.acquireReq(Request{ID: "a", Tenant: "alice", NoWait: true})
		if a.finished() {
			t.Fatalf("alice's no-wait request was answered while the gate was full: %v %q", a.out.Reason, a.out.Message())
		}
		b0.slot.Started(StartSucceeded)
		g.wake()
		synctest.Wait()
		if !a.finished() || !a.out.Admitted {
			t.Fatalf("alice's no-wait request, once the gate freed: %v %q", a.out.Reason, a.out.Message())
		}
		a.slot.Release()
		b0.slot.Release()
		synctest.Wait()
		if b1.slot != nil {
			b1.slot.Release()
		} else {
			b1.cancel()
		}
		synctest.Wait()
	})
}
