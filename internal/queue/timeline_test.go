package queue

import (
	"testing"
	"testing/synctest"
	"time"
)

// The spec's first timeline: sessions finish, admissions stay fast, every request
// gets the lenient budget.
func TestTimelineKeepingUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 2, Timeout: 5 * time.Minute})

		h.at("10:00:00")
		a, b := h.acquire("A", false), h.acquire("B", false)
		for _, p := range []*pending{a, b} {
			if !p.finished() || !p.out.Admitted || !p.out.Fast || p.out.Waited != 0 {
				t.Fatalf("10:00:00: want immediate fast admission, got %+v", p.out)
			}
		}
		h.check(row{clock: "10:00:00", idle: 0, inUse: 2})

		h.at("10:00:04")
		c := h.acquire("C", false)
		if c.finished() {
			t.Fatalf("10:00:04: C should queue, got %+v", c.out)
		}
		h.check(row{clock: "10:00:04", idle: 4 * time.Second, inUse: 2, waiting: 1,
			logHas: []string{"[C] [QUEUED] [keeping up] [budget 5m0s]"}})

		h.at("10:00:09")
		a.slot.Release()
		synctest.Wait()
		if !c.finished() || !c.out.Admitted || !c.out.Fast || c.out.Waited != 5*time.Second || c.out.Budget != 5*time.Minute {
			t.Fatalf("10:00:09: want C admitted fast after 5s with budget 5m, got %+v", c.out)
		}
		h.check(row{clock: "10:00:09", idle: 0, inUse: 2})

		h.at("10:02:00")
		d := h.acquire("D", false)
		if d.finished() {
			t.Fatalf("10:02:00: D should queue, got %+v", d.out)
		}
		h.check(row{clock: "10:02:00", idle: time.Minute + 51*time.Second, inUse: 2, waiting: 1,
			logHas: []string{"[D] [QUEUED] [keeping up] [budget 5m0s]"}})

		// D leaves with its client; nothing is refused, nothing leaks.
		d.cancel()
		synctest.Wait()
		if d.out.Reason != ReasonCancelled || d.slot != nil {
			t.Fatalf("D after cancel: %+v", d.out)
		}
		b.slot.Release()
		c.slot.Release()
		h.check(row{clock: "10:02:00", idle: time.Minute + 51*time.Second, inUse: 0,
			logHas: []string{"[D] [CLIENT_DISCONNECTED]"}})
	})
}

// The spec's second timeline: a broken image hangs, nothing is admitted again, idle
// only grows, and from D onwards every request fails within the saturated budget.
func TestTimelineJammed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 2, Timeout: 5 * time.Minute})

		h.at("10:00:00")
		a, b := h.acquire("A", false), h.acquire("B", false)
		if !a.out.Admitted || !b.out.Admitted {
			t.Fatal("A and B must be admitted")
		}
		h.check(row{clock: "10:00:00", idle: 0, inUse: 2})

		h.at("10:00:10")
		c := h.acquire("C", false)
		h.check(row{clock: "10:00:10", idle: 10 * time.Second, inUse: 2, waiting: 1,
			logHas: []string{"[C] [QUEUED] [keeping up] [budget 5m0s]"}})

		// idle reaches -queue-timeout: not yet saturated; one second later it is.
		h.at("10:05:00")
		h.check(row{clock: "10:05:00", idle: 5 * time.Minute, inUse: 2, waiting: 1})
		h.at("10:05:01")
		h.check(row{clock: "10:05:01", idle: 5*time.Minute + time.Second, inUse: 2, waiting: 1, congested: true})
		if c.finished() {
			t.Fatal("C keeps its 5m budget, fixed when it queued")
		}

		h.at("10:05:10")
		if !c.finished() || c.out.Reason != ReasonTimeout || c.out.Waited != 5*time.Minute || c.out.State != KeepingUp || c.out.Budget != 5*time.Minute {
			t.Fatalf("10:05:10: want C refused by its 5m keeping-up budget, got %+v", c.out)
		}
		if ra := c.out.RetryAfter; ra < time.Second || ra > 5*time.Minute || ra%time.Second != 0 {
			t.Errorf("C Retry-After = %v, want whole seconds in [1s, 5m]", ra)
		}
		h.check(row{clock: "10:05:10", idle: 5*time.Minute + 10*time.Second, inUse: 2, congested: true, timeouts: 1,
			logHas: []string{"[QUEUE_TIMEOUT] [keeping up] [waited 5m0s] [budget 5m0s]"}})

		h.at("10:05:11")
		d := h.acquire("D", false)
		if d.finished() {
			t.Fatal("D should queue")
		}
		h.check(row{clock: "10:05:11", idle: 5*time.Minute + 11*time.Second, inUse: 2, waiting: 1, congested: true, timeouts: 1,
			logHas: []string{"[D] [QUEUED] [saturated] [budget 30s]"}})

		h.at("10:05:40")
		if d.finished() {
			t.Fatal("D refused before its 30s were up")
		}
		h.at("10:05:41")
		if !d.finished() || d.out.Reason != ReasonShed || d.out.Waited != 30*time.Second || d.out.State != Saturated || d.out.Budget != 30*time.Second {
			t.Fatalf("10:05:41: want D shed after 30s, got %+v", d.out)
		}
		h.check(row{clock: "10:05:41", idle: 5*time.Minute + 41*time.Second, inUse: 2, congested: true, timeouts: 1, sheds: 1,
			logHas: []string{"[QUEUE_SHED] [saturated] [waited 30s] [budget 30s]"}})

		// The jam clears: a slot frees with nobody waiting; that is not an admission,
		// so idle keeps growing, but with a free slot nobody would queue.
		a.slot.Release()
		h.check(row{clock: "10:05:41", idle: 5*time.Minute + 41*time.Second, inUse: 1, timeouts: 1, sheds: 1})
		// The next arrival is admitted at once: fast, idle resets, the state is keeping up.
		e := h.acquire("E", false)
		if !e.out.Admitted || !e.out.Fast {
			t.Fatalf("E: %+v", e.out)
		}
		h.check(row{clock: "10:05:41", idle: 0, inUse: 2, timeouts: 1, sheds: 1})
		b.slot.Release()
		e.slot.Release()
	})
}
