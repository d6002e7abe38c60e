package session

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/websummoner/websummoner/internal/launcher"
)

// fakeInstance counts Stops and can be made to "crash"; no browser is involved
// because these tests are about the registry's timers and exactly-once release.
type fakeInstance struct {
	stops  atomic.Int32
	exited chan struct{}
	once   sync.Once
}

func newFake() *fakeInstance { return &fakeInstance{exited: make(chan struct{})} }

func (f *fakeInstance) Endpoints() launcher.Endpoints {
	return launcher.Endpoints{Driver: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}}
}
func (f *fakeInstance) SessionCreated(string, json.RawMessage) {}
func (f *fakeInstance) Exited() <-chan struct{}                { return f.exited }
func (f *fakeInstance) ExitReason() string                     { return "driver process ended: signal: killed" }
func (f *fakeInstance) Describe() string                       { return "fake" }
func (f *fakeInstance) Stop(context.Context) error             { f.stops.Add(1); return nil }
func (f *fakeInstance) crash()                                 { f.once.Do(func() { close(f.exited) }) }

type countingSlot struct{ n atomic.Int32 }

func (c *countingSlot) Release() { c.n.Add(1) }

func setup(t *testing.T, opts Options) (*Registry, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	r, err := New(opts, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	return r, reg
}

func add(t *testing.T, r *Registry, id string, idle time.Duration) (*fakeInstance, *countingSlot) {
	inst, slot := newFake(), &countingSlot{}
	if err := r.Add(&Session{ID: id, Instance: inst, Idle: idle, Started: time.Now()}, slot); err != nil {
		t.Fatal(err)
	}
	return inst, slot
}

func TestIdleTimeoutAndCommandsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := setup(t, Options{})
		inst, slot := add(t, r, "a", time.Minute)
		time.Sleep(59 * time.Second)
		s, ok := r.Begin("a") // a command: the idle clock stops while it runs
		if !ok {
			t.Fatal("session gone early")
		}
		time.Sleep(5 * time.Minute) // a long command
		synctest.Wait()
		if r.Len() != 1 {
			t.Fatal("ended during a command")
		}
		r.Done(s)
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if r.Len() != 1 {
			t.Fatal("idle timer did not restart from the command's end")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if r.Len() != 0 || inst.stops.Load() != 1 || slot.n.Load() != 1 {
			t.Fatalf("after idle: len %d stops %d releases %d", r.Len(), inst.stops.Load(), slot.n.Load())
		}
		if why, ok := r.Ended("a"); !ok || why == "" {
			t.Fatal("ended session not remembered")
		}
	})
}

func TestLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := setup(t, Options{MaxLifetime: time.Hour})
		_, slot := add(t, r, "a", time.Minute)
		for range 70 { // busy: a command every minute keeps idle away
			time.Sleep(59 * time.Second)
			s, ok := r.Begin("a")
			if !ok {
				break
			}
			r.Done(s)
		}
		if r.Len() != 0 || slot.n.Load() != 1 {
			t.Fatal("lifetime not enforced")
		}
		if got := testutil.ToFloat64(r.ended.WithLabelValues(ReasonLifetime)); got != 1 {
			t.Fatalf("ended{lifetime} = %v", got)
		}
	})
}

func TestCrashEndsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := setup(t, Options{})
		inst, slot := add(t, r, "a", 0)
		inst.crash()
		synctest.Wait()
		if r.Len() != 0 || slot.n.Load() != 1 || inst.stops.Load() != 1 {
			t.Fatal("crash did not end the session")
		}
		if why, _ := r.Ended("a"); why != "the browser exited (driver process ended: signal: killed)" {
			t.Fatalf("why = %q", why)
		}
	})
}

// Every way to end a session racing at once: one Stop, one Release, one count.
func TestEndExactlyOnce(t *testing.T) {
	for range 100 {
		r, _ := setup(t, Options{})
		inst, slot := newFake(), &countingSlot{}
		s := &Session{ID: "a", Instance: inst, Idle: time.Microsecond, Started: time.Now()}
		if err := r.Add(s, slot); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, reason := range []string{ReasonDeleted, ReasonShutdown, ReasonClientGone} {
			wg.Go(func() { r.End(s, reason) })
		}
		wg.Go(inst.crash)
		wg.Wait()
		r.EndAll(ReasonShutdown)
		if inst.stops.Load() != 1 || slot.n.Load() != 1 {
			t.Fatalf("stops %d releases %d", inst.stops.Load(), slot.n.Load())
		}
		var total float64
		for _, rs := range reasons {
			total += testutil.ToFloat64(r.ended.WithLabelValues(rs))
		}
		if total != 1 {
			t.Fatalf("ended counted %v times", total)
		}
	}
}

// A driver may give a new session the id of one that has ended and been
// forgotten: a late end of the first (a DELETE answered slowly, a crash
// noticed late) leaves the second.
func TestEndIsOfTheSessionNotItsID(t *testing.T) {
	r, _ := setup(t, Options{Remember: 1})
	add(t, r, "a", 0)
	old, _ := r.Get("a")
	if !r.End(old, ReasonDeleted) {
		t.Fatal("the first session did not end")
	}
	add(t, r, "b", 0)
	b, _ := r.Get("b")
	r.End(b, ReasonDeleted) // "a" is forgotten
	inst, slot := add(t, r, "a", 0)
	if r.End(old, ReasonCrashed) || r.EndThen(old, ReasonDeleted, func() { t.Error("removed called for another session") }) {
		t.Fatal("a late end of the first session ended the second")
	}
	if s, ok := r.Get("a"); !ok || s == old || inst.stops.Load() != 0 || slot.n.Load() != 0 {
		t.Fatalf("the second session: live %v, stops %d, releases %d", ok, inst.stops.Load(), slot.n.Load())
	}
}

func TestDuplicateAndRemember(t *testing.T) {
	r, _ := setup(t, Options{Remember: 2})
	add(t, r, "a", 0)
	if err := r.Add(&Session{ID: "a", Instance: newFake()}, &countingSlot{}); err == nil {
		t.Fatal("duplicate id accepted")
	}
	for _, id := range []string{"b", "c"} {
		add(t, r, id, 0)
	}
	for _, id := range []string{"a", "b", "c"} {
		s, _ := r.Get(id)
		r.End(s, ReasonDeleted)
	}
	if _, ok := r.Ended("a"); ok {
		t.Fatal("remembered more than Remember")
	}
	if _, ok := r.Ended("c"); !ok {
		t.Fatal("forgot the newest")
	}
	// A remembered id is refused as a live one is: the new session would be
	// taken for the old one's (its owner, why it ended, its kept files).
	if err := r.Add(&Session{ID: "c", Instance: newFake()}, &countingSlot{}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("an ended session's remembered id: %v, want ErrDuplicate", err)
	}
	add(t, r, "a", 0) // forgotten: a driver's id may come again
}

// Touch (side-channel traffic) restarts the idle timeout as a command's end
// does, without holding it: a session touched once and then left ends an idle
// timeout later.
func TestTouchRestartsTheIdleTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := setup(t, Options{})
		_, slot := add(t, r, "a", time.Minute)
		s, _ := r.Get("a")
		for range 3 {
			time.Sleep(50 * time.Second)
			r.Touch(s)
		}
		synctest.Wait()
		if r.Len() != 1 || r.IdleFor(s) != 0 {
			t.Fatalf("touched every 50 s for 150 s of a 1 min idle timeout: %d sessions, idle for %v", r.Len(), r.IdleFor(s))
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if r.Len() != 1 {
			t.Fatal("ended less than an idle timeout after the last touch")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if r.Len() != 0 || slot.n.Load() != 1 {
			t.Fatalf("a touch held the session: %d live, slot released %d times", r.Len(), slot.n.Load())
		}
	})
}
