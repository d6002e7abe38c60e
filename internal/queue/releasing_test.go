package queue

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A slot whose session has ended and whose browser is being torn down is
// waited for by a request that would otherwise be refused for every slot
// being busy (no-wait, or -disable-queue): DELETE and then a new session at
// once — every CI run's pattern — must not be refused. One releasing slot
// takes one such request; the next is refused as before.
func TestReleasingSlotIsWaitedFor(t *testing.T) {
	for _, c := range []struct {
		name      string
		opts      Options
		noWait    bool
		refusedAs Reason
	}{
		{"no-wait", Options{Limit: 1, Timeout: time.Minute}, true, ReasonNoWait},
		{"disable-queue", Options{Limit: 1, Timeout: time.Minute, Disabled: true}, false, ReasonDisabled},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q, err := New(c.opts, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				held, out := q.Acquire(context.Background(), Request{ID: "A"})
				if !out.Admitted {
					t.Fatalf("first request: %+v", out)
				}
				if _, out := q.Acquire(context.Background(), Request{ID: "B", NoWait: c.noWait}); out.Reason != c.refusedAs {
					t.Fatalf("with the slot in use and not releasing: reason %q, want %q", out.Reason, c.refusedAs)
				}
				held.Releasing()
				held.Releasing() // only the first call counts
				type result struct {
					s   *Slot
					out Outcome
				}
				got := make(chan result, 1)
				go func() {
					s, out := q.Acquire(context.Background(), Request{ID: "C", NoWait: c.noWait})
					got <- result{s, out}
				}()
				synctest.Wait()
				if st := q.Stats(); st.Waiting != 1 || st.InUse != 1 {
					t.Fatalf("while the slot is torn down: %+v, want 1 waiting and the slot still in use (-limit exact)", st)
				}
				// A second such request finds no releasing slot left for it.
				if _, out := q.Acquire(context.Background(), Request{ID: "D", NoWait: c.noWait}); out.Reason != c.refusedAs {
					t.Fatalf("a second request for one releasing slot: reason %q, want %q", out.Reason, c.refusedAs)
				}
				time.Sleep(2 * time.Second) // the teardown takes a while
				held.Release()
				r := <-got
				if !r.out.Admitted || !r.out.Queued {
					t.Fatalf("request C after the release: %+v, want admitted after queueing", r.out)
				}
				r.s.Release()
				if st := q.Stats(); st.InUse != 0 || st.Waiting != 0 {
					t.Fatalf("after all released: %+v", st)
				}
				// The releasing count went back with the release: a no-wait
				// request with the slot busy again is refused.
				s, _ := q.Acquire(context.Background(), Request{ID: "E"})
				if _, out := q.Acquire(context.Background(), Request{ID: "F", NoWait: c.noWait}); out.Reason != c.refusedAs {
					t.Fatalf("after the releasing slot was handed on: reason %q, want %q", out.Reason, c.refusedAs)
				}
				s.Release()
			})
		})
	}
}

// A request that may not wait for a slot (no-wait, or -disable-queue) is
// refused only when it would have to wait for another session to end. With a
// slot free for it, it waits for its start's turn — a hub that has just
// started paces its first starts — as Selenoid would have started it: five
// parallel jobs on -limit 5 all get sessions. Its wait is bounded by
// TurnTimeout within its state's budget, and a refusal says why, under the
// request's own reason, never as a shed.
func TestMayNotWaitTakesItsFreeSlot(t *testing.T) {
	for _, c := range []struct {
		name      string
		disabled  bool
		noWait    bool
		refusedAs Reason
	}{
		{"no-wait", false, true, ReasonNoWait},
		{"disable-queue", true, false, ReasonDisabled},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &fakeGate{permits: 2}
				h := newHarness(t, Options{Limit: 5, Timeout: 5 * time.Minute, Disabled: c.disabled, Gate: g, TurnTimeout: 30 * time.Second})
				var jobs []*pending
				for _, id := range []string{"A", "B", "C", "D", "E"} {
					jobs = append(jobs, h.acquire(id, c.noWait))
				}
				for i, p := range jobs[:2] {
					if !p.finished() || !p.out.Admitted || p.out.Queued {
						t.Fatalf("job %d with the gate open: %+v, want admitted at once", i, p.out)
					}
				}
				for i, p := range jobs[2:] {
					if p.finished() {
						t.Fatalf("job %d with a free slot behind the gate: %+v, want it waiting for its turn", i+2, p.out)
					}
				}
				// All five slots are taken or promised: a sixth job is refused,
				// for every slot being busy.
				f := h.acquire("F", c.noWait)
				if !f.finished() || f.out.Reason != c.refusedAs || !strings.Contains(f.out.Message(), "promised to the 3 requests already waiting") {
					t.Fatalf("a sixth job: %+v %q, want %s for the slots promised", f.out, f.out.Message(), c.refusedAs)
				}
				time.Sleep(3 * time.Second) // the first two browsers start
				for _, p := range jobs[:2] {
					p.slot.Started(StartSucceeded)
				}
				g.wake()
				synctest.Wait()
				time.Sleep(3 * time.Second)
				jobs[2].slot.Started(StartSucceeded)
				jobs[3].slot.Started(StartSucceeded)
				g.wake()
				synctest.Wait()
				for i, p := range jobs[2:] {
					if !p.finished() || !p.out.Admitted || p.out.Waited == 0 {
						t.Fatalf("job %d once the gate let it start: %+v, want admitted after its turn", i+2, p.out)
					}
				}
				if got := h.metric("websummoner_queue_rejected_total", "reason", string(c.refusedAs)); got != 1 {
					t.Fatalf("%s refusals counted: %v, want 1 (the sixth job)", c.refusedAs, got)
				}
				g2 := h.acquire("G", c.noWait)
				if !g2.finished() || g2.out.Reason != c.refusedAs || !strings.Contains(g2.out.Message(), "all 5 slots (-limit) are busy") {
					t.Fatalf("with every slot held: %+v %q", g2.out, g2.out.Message())
				}

				// A turn that does not come: the start gate holds every start
				// (the engine is down) while a slot is free. The request is
				// refused after TurnTimeout, under its own reason.
				jobs[0].slot.Release()
				synctest.Wait()
				g.mu.Lock()
				g.permits = 0
				g.mu.Unlock()
				before := h.metric("websummoner_queue_rejected_total", "reason", "shed") + h.metric("websummoner_queue_rejected_total", "reason", "timeout")
				start := time.Now()
				x := h.acquire("X", c.noWait)
				endsAt(t, x, 30*time.Second)
				if x.out.Reason != c.refusedAs || time.Since(start) != 30*time.Second || !strings.Contains(x.out.Message(), "did not get its turn within 30s") {
					t.Fatalf("a turn that never came: %+v %q after %v", x.out, x.out.Message(), time.Since(start))
				}
				if after := h.metric("websummoner_queue_rejected_total", "reason", "shed") + h.metric("websummoner_queue_rejected_total", "reason", "timeout"); after != before {
					t.Fatal("a turn that never came was counted as a shed or a timeout")
				}
				if st := h.q.Stats(); st.InUse != 4 || st.Waiting != 0 {
					t.Fatalf("after the refusal: %+v, want the 4 sessions and no waiter", st)
				}
				for _, p := range jobs[1:] {
					p.slot.Release()
				}
			})
		})
	}
}

// Saturated, a request that may not wait gets the saturated budget for its
// turn (TurnTimeout being longer); with -queue-congestion-timeout 0 it is
// refused at once. A tenant at its maxSessions is refused, and told so.
func TestMayNotWaitBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{permits: 0}
		h := newHarness(t, Options{Limit: 2, Timeout: time.Minute, Gate: g, TurnTimeout: time.Hour})
		time.Sleep(2 * time.Minute) // nothing admitted: saturated
		x := h.acquire("X", true)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if !x.finished() || x.out.Reason != ReasonNoWait || x.out.Waited != 6*time.Second || x.out.State != Saturated {
			t.Fatalf("saturated: %+v, want no_wait after the saturated budget of 6s", x.out)
		}

		h0 := newHarness(t, Options{Limit: 2, Timeout: time.Minute, CongestionTimeout: 0, CongestionTimeoutSet: true, Gate: &fakeGate{}, TurnTimeout: time.Hour})
		time.Sleep(2 * time.Minute)
		if y := h0.acquire("Y", true); !y.finished() || y.out.Reason != ReasonNoWait || y.out.Queued || !strings.Contains(y.out.Message(), "-queue-congestion-timeout is 0") {
			t.Fatalf("saturated with a saturated budget of 0: %+v %q, want refused at once, saying why", y.out, y.out.Message())
		}

		// A spare slot torn down, then handed to a tenant (the warm pool's
		// order), is counted back once at its release.
		one, err := ParseQuotas([]byte(`{"alice": {"maxSessions": 1}}`))
		if err != nil {
			t.Fatal(err)
		}
		hs := newHarness(t, Options{Limit: 3, Quotas: one})
		spare := hs.q.Spare(1, "")
		spare.Releasing()
		if !spare.Assign("alice") {
			t.Fatal("a spare slot not handed to a tenant below its maxSessions")
		}
		spare.Release()
		held := hs.acquireReq(Request{ID: "H", Tenant: "alice"})
		if !held.finished() || !held.out.Admitted {
			t.Fatalf("alice's session after the spare's release: %+v, want it admitted (the spare counted back once)", held.out)
		}
		// alice's one session is deleted; her next, at once, waits for it.
		held.slot.Releasing()
		e := hs.acquireReq(Request{ID: "E", Tenant: "alice", NoWait: true})
		if e.finished() {
			t.Fatalf("alice's next session after her DELETE: %+v %q, want it waiting for the teardown", e.out, e.out.Message())
		}
		held.slot.Release()
		synctest.Wait()
		if !e.finished() || !e.out.Admitted {
			t.Fatalf("after the teardown: %+v", e.out)
		}
		e.slot.Release()

		// Behind other requests for their turns, a request may wait a turn
		// for each of them and its own.
		hb := newHarness(t, Options{Limit: 5, Timeout: time.Hour, Gate: &fakeGate{}, TurnTimeout: time.Minute})
		p, q := hb.acquire("P", false), hb.acquire("Q", false)
		defer func() { p.cancel(); q.cancel(); synctest.Wait() }()
		z := hb.acquire("Z", true)
		endsAt(t, z, 3*time.Minute)
		if z.out.Reason != ReasonNoWait || z.out.Budget != 3*time.Minute {
			t.Fatalf("after three turns: %+v", z.out)
		}

		quotas, err := ParseQuotas([]byte(`{"alice": {"maxSessions": 1}}`))
		if err != nil {
			t.Fatal(err)
		}
		hq := newHarness(t, Options{Limit: 3, Quotas: quotas})
		a := hq.acquireReq(Request{ID: "A", Tenant: "alice"})
		b := hq.acquireReq(Request{ID: "B", Tenant: "alice", NoWait: true})
		if !b.finished() || b.out.Reason != ReasonNoWait || !strings.Contains(b.out.Message(), `"alice" already runs its maxSessions of 1`) {
			t.Fatalf("a tenant at maxSessions: %+v %q", b.out, b.out.Message())
		}
		// Its session deleted and its browser being torn down, the tenant's
		// next session at once waits for it, as a slot torn down is waited
		// for: DELETE, then a new session, through ggr.
		a.slot.Releasing()
		c := hq.acquireReq(Request{ID: "C", Tenant: "alice", NoWait: true})
		if c.finished() {
			t.Fatalf("a tenant's session after its DELETE: %+v %q, want it waiting for the teardown", c.out, c.out.Message())
		}
		d := hq.acquireReq(Request{ID: "D", Tenant: "alice", NoWait: true})
		if !d.finished() || d.out.Reason != ReasonNoWait {
			t.Fatalf("a second session for one being torn down: %+v", d.out)
		}
		a.slot.Release()
		synctest.Wait()
		if !c.finished() || !c.out.Admitted {
			t.Fatalf("after the teardown: %+v", c.out)
		}
		c.slot.Release()
	})
}

// endsAt checks, in fake time, that p is still waiting a nanosecond before d
// from now and has its answer at d.
func endsAt(t *testing.T, p *pending, d time.Duration) {
	t.Helper()
	time.Sleep(d - time.Nanosecond)
	synctest.Wait()
	if p.finished() {
		t.Fatalf("answered before %v: %+v", d, p.out)
	}
	time.Sleep(time.Nanosecond)
	synctest.Wait()
	if !p.finished() {
		t.Fatalf("no answer at %v", d)
	}
}
