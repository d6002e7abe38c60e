package hangup

import (
	"crypto/tls"
	"net"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection: the one the watcher
// watches (the hub's) and its peer (the client's).
func pair(t *testing.T) (hub, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	hub, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hub.Close(); client.Close() })
	return hub, client
}

func newWatcher(t *testing.T) *Watcher { return &Watcher{} }

func waitGone(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: gone was not called", what)
	}
}

func TestCloseAndResetAreSeen(t *testing.T) {
	w := newWatcher(t)
	for _, tc := range []struct {
		name  string
		leave func(net.Conn)
	}{
		{"close", func(c net.Conn) { c.Close() }},
		{"reset", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }},
		{"half-close", func(c net.Conn) { c.(*net.TCPConn).CloseWrite() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub, client := pair(t)
			var calls atomic.Int32
			gone := make(chan struct{})
			stop := w.Watch(hub, func() {
				if calls.Add(1) == 1 {
					close(gone)
				}
			})
			tc.leave(client)
			waitGone(t, gone, tc.name)
			stop()
			if n := calls.Load(); n != 1 {
				t.Fatalf("gone called %d times, want 1", n)
			}
		})
	}
}

// Bytes a waiting client sends are neither taken as leaving nor consumed.
func TestBytesAreLeftUnread(t *testing.T) {
	w := newWatcher(t)
	hub, client := pair(t)
	var calls atomic.Int32
	gone := make(chan struct{})
	stop := w.Watch(hub, func() { calls.Add(1); close(gone) })
	defer stop()
	if _, err := client.Write([]byte("pipelined")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	hub.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := hub.Read(buf); err != nil || string(buf[:n]) != "pipelined" {
		t.Fatalf("the hub's side read %q, %v: the watcher must leave bytes alone", buf[:n], err)
	}
	if calls.Load() != 0 {
		t.Fatal("bytes from the client were taken for a hang-up")
	}
	client.Close()
	waitGone(t, gone, "close after bytes")
}

// A stopped watch never fires, even when its peer leaves afterwards.
func TestStopBeforeHangUp(t *testing.T) {
	w := newWatcher(t)
	hub1, client1 := pair(t)
	hub2, client2 := pair(t)
	var fired1 atomic.Bool
	stop1 := w.Watch(hub1, func() { fired1.Store(true) })
	gone2 := make(chan struct{})
	stop2 := w.Watch(hub2, func() { close(gone2) })
	defer stop2()
	stop1()
	client1.Close()
	client2.Close()
	waitGone(t, gone2, "second connection")
	// Both hang-ups reached the kernel before the second was reported; the
	// first's registration is gone, so nothing can report it.
	if fired1.Load() {
		t.Fatal("a stopped watch fired")
	}
}

// A thousand watched connections cost no goroutine each.
func TestManyConnectionsNoGoroutineEach(t *testing.T) {
	w := newWatcher(t)
	const n = 1000
	before := runtime.NumGoroutine()
	var left atomic.Int32
	all := make(chan struct{})
	clients := make([]net.Conn, n)
	for i := range n {
		hub, client := pair(t)
		clients[i] = client
		w.Watch(hub, func() {
			if left.Add(1) == n {
				close(all)
			}
		})
	}
	if g := runtime.NumGoroutine(); g > before+10 {
		t.Fatalf("%d goroutines while watching %d connections (%d before)", g, n, before)
	}
	for _, c := range clients {
		c.Close()
	}
	waitGone(t, all, "a thousand connections")
}

func TestTLSConnection(t *testing.T) {
	w := newWatcher(t)
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS() // for its certificate
	defer srv.Close()
	hubRaw, clientRaw := pair(t)
	hub := tls.Server(hubRaw, srv.TLS)
	client := tls.Client(clientRaw, &tls.Config{InsecureSkipVerify: true})
	errc := make(chan error, 1)
	go func() { errc <- client.Handshake() }()
	if err := hub.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	stop := w.Watch(hub, func() { close(gone) })
	defer stop()
	clientRaw.Close()
	waitGone(t, gone, "TLS")
}

// The goroutine and descriptors exist only while something is watched, and
// come back for the next watch.
func TestIdleWatcherHoldsNothing(t *testing.T) {
	w := newWatcher(t)
	for round := range 2 {
		hub1, _ := pair(t)
		hub2, client2 := pair(t)
		stop1 := w.Watch(hub1, func() {})
		gone2 := make(chan struct{})
		w.Watch(hub2, func() { close(gone2) })
		w.mu.Lock()
		in := w.inst
		w.mu.Unlock()
		if in == nil {
			t.Fatalf("round %d: no instance while watching", round)
		}
		client2.Close() // reported: one watch left
		waitGone(t, gone2, "second")
		select {
		case <-in.done:
			t.Fatalf("round %d: the instance closed while a connection was watched", round)
		default:
		}
		stop1() // the last: the loop closes the instance
		select {
		case <-in.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the instance outlived its last watch", round)
		}
		w.mu.Lock()
		left := w.inst
		w.mu.Unlock()
		if left != nil {
			t.Fatalf("round %d: the watcher still holds an instance", round)
		}
	}
}

// Signals to the process (Go's own preemption signal among them) do not
// disturb a watch: it still reports the hang-up after a thousand.
func TestSignalsDoNotDisturbTheWatch(t *testing.T) {
	w := newWatcher(t)
	hub, client := pair(t)
	gone := make(chan struct{})
	stop := w.Watch(hub, func() { close(gone) })
	defer stop()
	for range 1000 {
		// SIGURG: Go ignores it unless it preempts.
		if err := syscall.Kill(os.Getpid(), syscall.SIGURG); err != nil {
			t.Fatal(err)
		}
	}
	client.Close()
	waitGone(t, gone, "after signals")
}

// While it waits, the watcher's goroutine is parked in Go's poller, not
// blocked in a system call: it holds no thread and no CPU slot, which with one
// CPU slot for the hub (GOMAXPROCS=1) would be the hub's only one.
func TestWaitHoldsNoThread(t *testing.T) {
	w := newWatcher(t)
	hub, _ := pair(t)
	stop := w.Watch(hub, func() {})
	defer stop()
	buf := make([]byte, 1<<20)
	var state string
	for range 100000 {
		runtime.Gosched()
		state = ""
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "hangup.(*Watcher).loop") {
				state, _, _ = strings.Cut(g, "\n")
			}
		}
		if strings.Contains(state, "[IO wait") {
			return
		}
	}
	t.Fatalf("the watcher's goroutine is %q, want it parked in the poller ([IO wait])", state)
}

// A connection watched again after its readable watch fired (the HTTP
// server's gate holds a connection again after each request a queued waiter
// was answered on) is watched by the kernel again, not reported at once: the
// fired one-shot registration stays in the epoll set, inert, and must be
// re-armed rather than added a second time.
func TestWatchedAgainAfterReady(t *testing.T) {
	w := newWatcher(t)
	other, _ := pair(t)
	stopOther := w.Watch(other, func() {}) // keeps the instance, as a busy hub's
	defer stopOther()
	hub, client := pair(t)
	buf := make([]byte, 16)
	for round := range 3 {
		ready := make(chan struct{})
		stop := w.WatchReadable(hub, func() { close(ready) })
		// A watch the kernel would not take is ready before WatchReadable
		// returns.
		select {
		case <-ready:
			stop()
			t.Fatalf("round %d: ready with nothing to read", round)
		default:
		}
		if _, err := client.Write([]byte("GET")); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ready, "bytes to read")
		hub.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := hub.Read(buf); err != nil || string(buf[:n]) != "GET" {
			t.Fatalf("round %d: read %q, %v", round, buf[:n], err)
		}
	}
}
