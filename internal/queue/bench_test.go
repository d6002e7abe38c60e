package queue

import (
	"context"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"
)

func BenchmarkAcquireReleaseUncontended(b *testing.B) {
	q, err := New(Options{Limit: 5, Timeout: time.Minute}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, _ := q.Acquire(ctx, Request{})
		s.Release()
	}
}

// Contended: more goroutines than slots, so most acquires queue and are handed a
// slot by another goroutine's release.
func BenchmarkAcquireReleaseContended(b *testing.B) {
	q, err := New(Options{Limit: 2, Timeout: time.Minute}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, out := q.Acquire(ctx, Request{})
			if !out.Admitted {
				b.Errorf("refused: %+v", out)
				return
			}
			s.Release()
		}
	})
}

// BenchmarkWaiters10000 reports the heap and goroutine cost of 10,000 queued
// requests (the queue's share; the HTTP connection is measured by the load tool).
func BenchmarkWaiters10000(b *testing.B) {
	const n = 10000
	for b.Loop() {
		q, err := New(Options{Limit: 1, Timeout: time.Hour}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		hold, _ := q.Acquire(context.Background(), Request{})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { q.Acquire(ctx, Request{}) })
		}
		for q.Stats().Waiting < n {
			runtime.Gosched()
		}
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc+after.StackInuse-before.HeapAlloc-before.StackInuse)/n, "bytes/waiter")
		cancel()
		wg.Wait()
		hold.Release()
		if st := q.Stats(); st.Waiting != 0 || st.InUse != 0 {
			b.Fatalf("leak: %+v", st)
		}
	}
}

// BenchmarkHandOff measures, with 5,000 requests waiting, the time from a slot's
// release to the oldest waiter's Acquire returning with it.
func BenchmarkHandOff(b *testing.B) {
	const n = 5000
	q, err := New(Options{Limit: 1}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	slot, _ := q.Acquire(context.Background(), Request{})
	ctx, cancel := context.WithCancel(context.Background())
	admitted := make(chan *Slot)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if s, out := q.Acquire(ctx, Request{}); out.Admitted {
				admitted <- s
			}
		})
	}
	for q.Stats().Waiting < n {
		runtime.Gosched()
	}
	var lat []time.Duration
	for i := 0; i < b.N && i < n-1; i++ {
		t0 := time.Now()
		slot.Release()
		slot = <-admitted
		lat = append(lat, time.Since(t0))
	}
	cancel()
	slot.Release()
	go func() {
		for s := range admitted {
			s.Release()
		}
	}()
	wg.Wait()
	close(admitted)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
