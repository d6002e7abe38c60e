package hub

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/queue"
)

// TestWaiterMemory measures what a detached waiting request holds in the hub:
// Go heap and stacks per waiter, at 2,000 waiters on real connections. It runs
// from make bench and make bench-short (WEBSUMMONER_BENCH=1), asserts the
// counts (goroutines, bytes per waiter), and writes a heap profile when asked
// (WEBSUMMONER_HEAPPROFILE=file).
func TestWaiterMemory(t *testing.T) {
	if os.Getenv("WEBSUMMONER_BENCH") == "" {
		t.Skip("make bench and make bench-short run it (WEBSUMMONER_BENCH=1)")
	}
	const n = 2000
	if os.Getenv("WEBSUMMONER_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 1 // every allocation, so the profile adds up per waiter
	}
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	addr := serveBehindHubServer(t, f)
	_, body := f.do("POST", "/session", w3cChrome)
	held := body["value"].(map[string]any)["sessionId"].(string)
	measure := func() (heap, stack uint64) {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse, m.StackInuse
	}
	heap0, stack0 := measure()
	g0 := runtime.NumGoroutine()
	conns := make([]net.Conn, 0, n)
	for range n {
		conns = append(conns, rawPost(t, addr))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for f.q.Stats().Waiting < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests waiting after 2 minutes", f.q.Stats().Waiting, n)
		}
		time.Sleep(10 * time.Millisecond) // the server reads them in its own time
	}
	heap1, stack1 := measure()
	if path := os.Getenv("WEBSUMMONER_HEAPPROFILE"); path != "" {
		out, _ := os.Create(path)
		pprof.WriteHeapProfile(out)
		out.Close()
	}
	heap, stack := (float64(heap1)-float64(heap0))/n, (float64(stack1)-float64(stack0))/n
	fmt.Printf("waiters %d: Go heap+stacks %.1f KiB per waiter (heap %.1f, stacks %.1f; this test's client side included: its conns); goroutines %d\n",
		n, (heap+stack)/1024, heap/1024, stack/1024, runtime.NumGoroutine())
	// Counted, not timed, so asserted: a detached waiter holds no goroutine,
	// and its memory (the test's own end of the connection included) stays
	// under the 8 KiB a waiter is allowed; a waiter kept on its handler's
	// goroutine holds that goroutine's stack and the server's buffers.
	if g := runtime.NumGoroutine(); g > g0+n/20 {
		t.Errorf("%d goroutines with %d waiters, %d before: waiters are not detached from their handlers", g, n, g0)
	}
	if kib := (heap + stack) / 1024; kib > 8 {
		t.Errorf("%.1f KiB of Go heap and stacks per waiter, want ≤ 8", kib)
	}
	for _, c := range conns {
		c.Close()
	}
	deadline = time.Now().Add(2 * time.Minute)
	for f.q.Stats().Waiting > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still waiting 2 minutes after their clients closed", f.q.Stats().Waiting)
		}
		time.Sleep(10 * time.Millisecond) // each detached reader notices its close
	}
	f.do("DELETE", "/session/"+held, "")
	f.sess.Settled()
}

// serveBehindHubServer serves f's hub behind the server it runs behind in
// production (the first-byte gate, body deadlines, connection tracking), not
// httptest's bare one, until the test ends; it returns the address.
func serveBehindHubServer(t testing.TB, f *fixture) string {
	t.Helper()
	srv, err := httpserver.New(httpserver.Options{}, f.hub, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return ln.Addr().String()
}
