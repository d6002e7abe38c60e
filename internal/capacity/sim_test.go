package capacity

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/queue"
)

// fakeHost is a Docker host with capacity K: a start that begins while no more
// than K starts are under way takes base; one beyond K takes longer (base×n/K)
// and fails. K = 0 is an outage: every start fails after the deadline. A fake,
// because the real engine cannot be made to have a given capacity on demand.
type fakeHost struct {
	mu       sync.Mutex
	k        int
	base     time.Duration
	deadline time.Duration
	inFlight int
	maxSeen  int
	ok, fail int
}

func (h *fakeHost) setK(k int) {
	h.mu.Lock()
	h.k = k
	h.mu.Unlock()
}

func (h *fakeHost) setBase(d time.Duration) {
	h.mu.Lock()
	h.base = d
	h.mu.Unlock()
}

// start runs one browser start in fake time and reports whether it worked.
func (h *fakeHost) start() bool {
	h.mu.Lock()
	h.inFlight++
	n, k, base := h.inFlight, h.k, h.base
	h.maxSeen = max(h.maxSeen, n)
	h.mu.Unlock()
	ok := k > 0 && n <= k
	lat := base
	switch {
	case k == 0:
		lat = h.deadline
	case n > k:
		lat = min(time.Duration(float64(base)*float64(n)/float64(k)), h.deadline)
	}
	time.Sleep(lat)
	h.mu.Lock()
	h.inFlight--
	if ok {
		h.ok++
	} else {
		h.fail++
	}
	h.mu.Unlock()
	return ok
}

func (h *fakeHost) counts() (ok, fail int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok, h.fail
}

type sim struct {
	t    *testing.T
	g    *Gate
	q    *queue.Queue
	host *fakeHost
	wg   sync.WaitGroup
}

func newSim(t *testing.T, gopts Options, host *fakeHost) *sim {
	g, err := New(gopts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(queue.Options{Limit: gopts.Limit, Gate: g}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, g: g, q: q, host: host}
}

// session is one client: it asks for a session, starts a browser, holds it, and
// on a failed start tries again after a random back-off, up to tries times. It
// reports whether it was served in the end.
func (s *sim) session(ctx context.Context, hold time.Duration, tries int, r *rand.Rand) bool {
	for range tries {
		if ctx.Err() != nil {
			return false
		}
		slot, out := s.q.Acquire(ctx, queue.Request{})
		if !out.Admitted {
			return false
		}
		ok := s.host.start()
		if ok {
			slot.Started(queue.StartSucceeded)
			time.Sleep(hold)
			slot.Release()
			return true
		}
		slot.Started(queue.StartFailed)
		slot.Release()
		time.Sleep(time.Duration(1+r.IntN(5)) * time.Second) // the client's retry back-off
	}
	return false
}

// loop keeps n clients creating sessions back to back until ctx ends.
func (s *sim) loop(ctx context.Context, n int, hold time.Duration) {
	for i := range n {
		s.wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for ctx.Err() == nil {
				s.session(ctx, hold, 1, r)
				if ctx.Err() == nil {
					time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond)
				}
			}
		})
	}
}

// every samples the gate's limit each interval for d and returns the samples.
func (s *sim) every(interval, d time.Duration) []int {
	var out []int
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(interval)
		out = append(out, s.g.Stats().Limit)
	}
	return out
}
