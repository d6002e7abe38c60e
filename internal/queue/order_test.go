package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
)

// Waiting requests are admitted first in, first out, whether they wait in
// Acquire or through Notify (the hub's detached waiters), mixed in one queue.
func TestWaitersAreAdmittedInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := New(Options{Limit: 1}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		held, out := q.Acquire(context.Background(), Request{ID: "held"})
		if !out.Admitted {
			t.Fatal("the first request was not admitted to a free slot")
		}
		const n = 6
		admitted := make(chan string, n)
		slots := make(chan *Slot, n)
		for i := range n {
			id := fmt.Sprint("w", i)
			if i%2 == 0 {
				go func() {
					s, out := q.Acquire(context.Background(), Request{ID: id})
					if out.Admitted {
						admitted <- id
						slots <- s
					}
				}()
			} else {
				_, _, w := q.Enqueue(context.Background(), Request{ID: id})
				w.Notify(func(s *Slot, out Outcome) {
					if out.Admitted {
						admitted <- id
						slots <- s
					}
				})
			}
			synctest.Wait() // queued before the next arrives
		}
		if st := q.Stats(); st.Waiting != n {
			t.Fatalf("%d waiting, want %d", st.Waiting, n)
		}
		var order []string
		held.Release()
		for range n {
			order = append(order, <-admitted)
			(<-slots).Release()
		}
		want := []string{"w0", "w1", "w2", "w3", "w4", "w5"}
		if !slices.Equal(order, want) {
			t.Fatalf("admitted in the order %v, want the order of arrival %v", order, want)
		}
		if st := q.Stats(); st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("after every release: %+v", st)
		}
	})
}

// A slot handed to a waiter whose client leaves at that moment goes on to the
// next request: it is never kept by nobody. Which comes first, the hand-over
// or the leaving, is up to the scheduler; each round ends with every slot
// free whichever it was, and enough rounds take the racy order.
func TestSlotHandedToALeavingClientIsPassedOn(t *testing.T) {
	q, err := New(Options{Limit: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 300 {
		held, _ := q.Acquire(context.Background(), Request{ID: "held"})
		ctx, leave := context.WithCancel(context.Background())
		type result struct {
			s   *Slot
			out Outcome
		}
		got := make(chan result, 1)
		_, _, w := q.Enqueue(ctx, Request{ID: "leaving"})
		if round%2 == 0 {
			go func() {
				s, out := w.Wait()
				got <- result{s, out}
			}()
		} else {
			w.Notify(func(s *Slot, out Outcome) { got <- result{s, out} })
		}
		held.Release() // the slot goes to the waiter…
		leave()        // …as its client leaves
		r := <-got
		if r.out.Admitted {
			r.s.Release()
		} else if r.s != nil {
			t.Fatalf("round %d: a refused request got a slot: %+v", round, r.out)
		}
		if st := q.Stats(); st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("round %d: %+v after the client left and every slot was released: the slot handed to it was kept", round, st)
		}
	}
}
