package queue

import (
	"testing"
	"testing/synctest"
	"time"
)

// A warm-pool fill takes a slot only when no client could use it: a free
// slot, nobody waiting, and a start permit left over for a client.
func TestSpareIsTheLowestPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{permits: 2}
		h := newHarness(t, Options{Limit: 2, Timeout: time.Minute, Gate: g})
		s := h.q.Spare(1, "")
		if s == nil {
			t.Fatal("no spare slot on an empty grid")
		}
		if h.q.Spare(1, "") != nil {
			t.Fatal("a second fill took the gate's last permit, which a client's start could use")
		}
		s.Started(StartSucceeded)
		a := h.acquire("A", false)
		if !a.out.Admitted {
			t.Fatalf("a client was not admitted beside one fill: %+v", a.out)
		}
		if h.q.Spare(1, "") != nil || !h.q.Full() {
			t.Fatal("a fill took a slot beyond -limit")
		}
		b := h.acquire("B", false) // waits
		s.Releasing()
		if h.q.Spare(1, "") != nil {
			t.Fatal("a fill took a slot being torn down")
		}
		s.Release()
		synctest.Wait()
		if !b.finished() || !b.out.Admitted {
			t.Fatal("the slot a fill gave back did not go to the waiting client")
		}
		if h.q.Spare(1, "") != nil {
			t.Fatal("a fill took a slot with every slot held")
		}
		a.slot.Release()
		b.slot.Release()
		if h.metric("websummoner_queue_slots_in_use") != 0 {
			t.Fatal("slots left held")
		}
	})
}

// A spare admission is no client's: it neither resets idle; a claimed warm
// browser is a fast admission and does.
func TestSpareLeavesIdleAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{Limit: 2, Timeout: time.Minute})
		time.Sleep(10 * time.Second)
		s := h.q.Spare(1, "")
		if idle := h.q.Stats().Idle; idle != 10*time.Second {
			t.Fatalf("idle after a fill = %v, want 10s (a fill admits no client)", idle)
		}
		h.q.AdmittedFast()
		if idle := h.q.Stats().Idle; idle != 0 {
			t.Fatalf("idle after a warm browser was claimed = %v, want 0", idle)
		}
		s.Release()
		h.q.Close()
		if h.q.Spare(1, "") != nil {
			t.Fatal("a closed queue gave a spare slot")
		}
	})
}

// spareGate is a fakeGate that also tells fills from clients' starts, as
// internal/capacity's gate does.
type spareGate struct {
	fakeGate
	spares int
}

func (g *spareGate) TrySpare(cost int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight+cost+1 > g.permits {
		return false
	}
	g.inFlight += cost
	g.spares++
	return true
}

// A gate that knows fills reserves them itself (and may count the permit
// they leave to clients); Spare still refuses what it refuses.
func TestSpareAsksASpareGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &spareGate{fakeGate: fakeGate{permits: 2}}
		h := newHarness(t, Options{Limit: 2, Timeout: time.Minute, Gate: g})
		s := h.q.Spare(1, "")
		if s == nil || g.spares != 1 {
			t.Fatalf("spare slot %v, TrySpare calls %d: want a slot through TrySpare", s, g.spares)
		}
		if h.q.Spare(1, "") != nil {
			t.Fatal("a second fill took the gate's last permit")
		}
		s.Started(StartSucceeded)
		s.Release()
	})
}
