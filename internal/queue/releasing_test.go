package queue

import (
	"context"
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
