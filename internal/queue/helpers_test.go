package queue

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/websummoner/websummoner/internal/logtag"
)

// syncBuffer collects log output from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns what was logged since the last take.
func (b *syncBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

type harness struct {
	t     *testing.T
	q     *Queue
	reg   *prometheus.Registry
	logs  *syncBuffer
	start time.Time
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, reg: prometheus.NewRegistry(), logs: &syncBuffer{}, start: time.Now()}
	var err error
	h.q, err = New(opts, slog.New(logtag.NewHandler(h.logs, slog.LevelDebug)), h.reg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// at advances fake time to a wall-clock reading, taking the harness's start as 10:00:00.
func (h *harness) at(clock string) {
	h.t.Helper()
	c, err := time.Parse("15:04:05", clock)
	if err != nil {
		h.t.Fatal(err)
	}
	base, _ := time.Parse("15:04:05", "10:00:00")
	target := h.start.Add(c.Sub(base))
	if d := time.Until(target); d > 0 {
		time.Sleep(d)
	} else if d < 0 {
		h.t.Fatalf("clock %s is in the past", clock)
	}
	synctest.Wait()
}

type pending struct {
	done   chan struct{}
	slot   *Slot
	out    Outcome
	cancel context.CancelFunc
}

func (p *pending) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// acquire starts an Acquire in its own goroutine and returns once it has either
// finished or blocked in the queue.
func (h *harness) acquire(id string, noWait bool) *pending {
	return h.acquireReq(Request{ID: id, NoWait: noWait})
}

// acquireReq is acquire of any request.
func (h *harness) acquireReq(r Request) *pending {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pending{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(p.done)
		p.slot, p.out = h.q.Acquire(ctx, r)
	}()
	synctest.Wait()
	return p
}

// metric returns the value of a gauge or counter in the harness's registry.
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	return gather(h.t, h.reg, name, labels...)
}

func gather(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// row is what the spec's timeline tables say, plus the metrics behind them.
type row struct {
	clock     string
	idle      time.Duration
	inUse     int
	waiting   int
	congested bool
	timeouts  int
	sheds     int
	logHas    []string // substrings the lines logged at this row must contain
}

func (h *harness) check(r row) {
	h.t.Helper()
	st := h.q.Stats()
	if st.Idle != r.idle {
		h.t.Errorf("%s: idle = %v, want %v", r.clock, st.Idle, r.idle)
	}
	if got := h.metric("websummoner_queue_idle_seconds"); got != r.idle.Seconds() {
		h.t.Errorf("%s: idle_seconds = %v, want %v", r.clock, got, r.idle.Seconds())
	}
	if st.InUse != r.inUse || h.metric("websummoner_queue_slots_in_use") != float64(r.inUse) {
		h.t.Errorf("%s: in use = %d, want %d", r.clock, st.InUse, r.inUse)
	}
	if st.Waiting != r.waiting || h.metric("websummoner_queue_waiting") != float64(r.waiting) {
		h.t.Errorf("%s: waiting = %d, want %d", r.clock, st.Waiting, r.waiting)
	}
	want := 0.0
	if r.congested {
		want = 1
	}
	if got := h.metric("websummoner_queue_congested"); got != want || st.Congested != r.congested {
		h.t.Errorf("%s: congested = %v (stats %v), want %v", r.clock, got, st.Congested, r.congested)
	}
	if got := h.metric("websummoner_queue_rejected_total", "reason", "timeout"); got != float64(r.timeouts) {
		h.t.Errorf("%s: rejected{timeout} = %v, want %d", r.clock, got, r.timeouts)
	}
	if got := h.metric("websummoner_queue_rejected_total", "reason", "shed"); got != float64(r.sheds) {
		h.t.Errorf("%s: rejected{shed} = %v, want %d", r.clock, got, r.sheds)
	}
	logs := h.logs.take()
	for _, s := range r.logHas {
		if !strings.Contains(logs, s) {
			h.t.Errorf("%s: log lacks %q; got:\n%s", r.clock, s, logs)
		}
	}
	if len(r.logHas) == 0 && strings.Contains(logs, "[QUEUE_") {
		h.t.Errorf("%s: unexpected queue log lines:\n%s", r.clock, logs)
	}
}
