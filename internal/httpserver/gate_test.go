package httpserver

import (
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// newTestGate is a gate on a loopback listener whose held counts arrive on a
// channel, closed with the test.
func newTestGate(t *testing.T, timeout time.Duration) (*gate, chan int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counts := make(chan int, 10000)
	g := newGate(ln, timeout, func(n int) { counts <- n }, true)
	t.Cleanup(func() { g.Close() })
	return g, counts
}

func waitHeld(t *testing.T, counts chan int, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-counts:
			if got == n {
				return
			}
		case <-timeout:
			t.Fatalf("the gate never held %d connections", n)
		}
	}
}

// Clients that connect and send nothing cost no goroutine and never reach the
// HTTP server; the one that writes is handed over with its bytes unread.
func TestGateHoldsSilentConnectionsWithoutGoroutines(t *testing.T) {
	g, counts := newTestGate(t, time.Minute)
	before := runtime.NumGoroutine()
	const n = 500
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", g.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	waitHeld(t, counts, n)
	if grown := runtime.NumGoroutine() - before; grown > 20 {
		t.Fatalf("%d silent connections took %d goroutines", n, grown)
	}
	if _, err := io.WriteString(conns[123], "GET / HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := g.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	var c net.Conn
	select {
	case c = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection that wrote was not handed over")
	}
	defer c.Close()
	if c.RemoteAddr().String() != conns[123].LocalAddr().String() {
		t.Fatalf("handed over %v, want the one that wrote (%v)", c.RemoteAddr(), conns[123].LocalAddr())
	}
	buf := make([]byte, 64)
	m, _ := c.Read(buf)
	if got := string(buf[:m]); got != "GET / HTTP/1.1\r\n" {
		t.Fatalf("the handed-over connection reads %q: the gate consumed what it was sent", got)
	}
	if held := g.count(); held != n-1 {
		t.Fatalf("the gate holds %d, want %d", held, n-1)
	}
}

// A client that leaves without a word is handed over too (the HTTP server
// reads its end and closes it), so nothing of it stays in the gate.
func TestGateHandsOverAClientThatLeft(t *testing.T) {
	g, counts := newTestGate(t, time.Minute)
	c, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	waitHeld(t, counts, 1)
	c.Close()
	got, err := g.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if _, err := got.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read of the handed-over connection: %v, want EOF", err)
	}
	if held := g.count(); held != 0 {
		t.Fatalf("the gate still holds %d", held)
	}
}

// A client silent for the header timeout is closed by the gate; Close closes
// what is held, and Accept then says the listener is closed.
func TestGateTimeoutAndClose(t *testing.T) {
	g, counts := newTestGate(t, 100*time.Millisecond)
	silent, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a client silent past the timeout reads %v, want EOF (closed by the hub)", err)
	}
	g2, counts2 := newTestGate(t, time.Minute)
	held, err := net.Dial("tcp", g2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waitHeld(t, counts2, 1)
	g2.Close()
	held.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a held client after Close reads %v, want EOF", err)
	}
	if _, err := g2.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	_ = counts
}

// Near the descriptor limit, clients that have sent nothing for a second are
// shed like those that sent half their headers, and real requests go on.
func TestShedsSilentClientsNearTheLimit(t *testing.T) {
	s, addr := serve(t, Options{FileLimit: 24, Reserve: 10}, echoBody)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(1100 * time.Millisecond) // shedding spares a client's first second
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	r, err := client.Post("http://"+addr+"/", "text/plain", strings.NewReader("x"))
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("a request near the limit: %v %v", r, err)
	}
	r.Body.Close()
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if n := g.count(); n > 0 {
		t.Fatalf("%d silent clients left after shedding", n)
	}
	held[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := held[0].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a shed client reads %v, want EOF", err)
	}
}

// At most arrivalSlots connections are in their first request at once: the
// next readable one waits in the gate until one of them is done (or has had
// its grace).
func TestGateBoundsArrivals(t *testing.T) {
	g, counts := newTestGate(t, time.Minute)
	g.mu.Lock()
	g.grace = time.Hour // only arrived() gives a slot back here
	g.mu.Unlock()
	const n = arrivalSlots + 10
	for range n {
		c, err := net.Dial("tcp", g.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\n")
	}
	accepted := make(chan net.Conn, n)
	go func() {
		for {
			c, err := g.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var first []net.Conn
	for range arrivalSlots {
		select {
		case c := <-accepted:
			first = append(first, c)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d readable connections handed over", len(first), arrivalSlots)
		}
	}
	select {
	case <-accepted:
		t.Fatalf("a connection beyond the %d arrival slots was handed over", arrivalSlots)
	case <-time.After(300 * time.Millisecond):
	}
	g.arrived(first[0])
	g.arrived(first[0]) // twice: one slot only
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("a freed arrival slot did not let the next connection in")
	}
	select {
	case <-accepted:
		t.Fatal("one freed slot let two connections in")
	case <-time.After(300 * time.Millisecond):
	}
	_ = counts
}

// With the gate off (-first-byte-gate=false), a connection that has sent
// nothing is handed to the HTTP server at once, and the gate holds none.
func TestGateOffPassesSilentConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan int, 10)
	g := newGate(ln, time.Minute, func(n int) { held <- n }, false)
	defer g.Close()
	c, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := g.Accept()
	if err != nil {
		t.Fatalf("a silent connection was not handed over with the gate off: %v", err)
	}
	defer got.Close()
	if got.RemoteAddr().String() != c.LocalAddr().String() {
		t.Fatalf("handed over %v, want %v", got.RemoteAddr(), c.LocalAddr())
	}
	if n := g.count(); n != 0 || len(held) != 0 {
		t.Fatalf("the gate holds %d connections (told %d times) with the gate off", n, len(held))
	}
}
