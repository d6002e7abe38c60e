package launcher

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// closedPort returns a loopback address nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRefused(t *testing.T) {
	if !refused(closedPort(t)) {
		t.Fatal("a loopback port nobody listens on was not refused")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if refused(ln.Addr().String()) {
		t.Fatal("a listening port was taken as refused")
	}
	// Not decided here: names, and addresses off the machine.
	for _, host := range []string{"localhost:1", "192.0.2.1:1", "garbage"} {
		if refused(host) {
			t.Errorf("%s taken as refused", host)
		}
	}
}

// countingTransport counts the HTTP polls that reach it.
type countingTransport struct {
	polls atomic.Int32
	seen  chan struct{} // a send per poll, when not nil and not full
	rt    http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.polls.Add(1)
	if c.seen != nil {
		select {
		case c.seen <- struct{}{}:
		default:
		}
	}
	return c.rt.RoundTrip(r)
}

// While nothing listens, WaitReady sends no HTTP poll; once the driver
// listens, one poll finds it.
func TestWaitReadyPollsOnlyAListeningDriver(t *testing.T) {
	ct := &countingTransport{rt: &http.Transport{DisableKeepAlives: true}}
	client := &http.Client{Transport: ct}
	addr := closedPort(t)
	base, _ := url.Parse("http://" + addr)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := WaitReady(ctx, client, base, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady on a closed port: %v", err)
	}
	if n := ct.polls.Load(); n != 0 {
		t.Fatalf("%d HTTP polls of a port that refuses connections, want 0", n)
	}
	// A driver that listens (on a port of its own: the closed one may be
	// anybody's by now).
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	base, _ = url.Parse(srv.URL)
	if err := WaitReady(context.Background(), client, base, nil); err != nil {
		t.Fatal(err)
	}
	if n := ct.polls.Load(); n != 1 {
		t.Fatalf("%d HTTP polls of a listening driver, want 1", n)
	}
}

// WaitListening asks instead of connecting: while the answer is "not yet"
// no connection is made and no poll sent, even to a port that listens; once
// it is "yes", one poll finds the driver. An answer it cannot give ("not
// known") falls back to the connect.
func TestWaitListeningAsksInsteadOfConnecting(t *testing.T) {
	var accepted atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	ct := &countingTransport{rt: &http.Transport{DisableKeepAlives: true}}
	client := &http.Client{Transport: ct}
	asked := 0
	if err := WaitListening(context.Background(), client, base, nil, func() (bool, bool) {
		asked++
		return asked > 3, true
	}); err != nil {
		t.Fatal(err)
	}
	if asked != 4 || ct.polls.Load() != 1 || accepted.Load() != 1 {
		t.Fatalf("asked %d times, %d polls, %d connections; want 4, 1, 1", asked, ct.polls.Load(), accepted.Load())
	}
	if err := WaitListening(context.Background(), client, base, nil, func() (bool, bool) { return false, false }); err != nil {
		t.Fatal(err)
	}
	if ct.polls.Load() != 2 {
		t.Fatalf("%d polls; an unknown answer must fall back to the connect and find the driver", ct.polls.Load())
	}
}

// Something that accepts for the driver and closes without answering, as
// Docker's port proxy does before the container's driver listens: WaitReady
// polls over HTTP every round and finds the driver when it answers.
func TestWaitReadyBehindAProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var answer atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if answer.Load() {
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
				}
			}
			c.Close()
		}
	}()
	ct := &countingTransport{rt: &http.Transport{DisableKeepAlives: true}, seen: make(chan struct{}, 100)}
	client := &http.Client{Transport: ct}
	base, _ := url.Parse("http://" + ln.Addr().String())
	done := make(chan error, 1)
	go func() { done <- WaitReady(context.Background(), client, base, nil) }()
	for range 3 { // three HTTP polls while the "proxy" closes on them
		select {
		case <-ct.seen:
		case err := <-done:
			t.Fatalf("WaitReady returned %v before the driver answered", err)
		case <-time.After(10 * time.Second):
			t.Fatal("WaitReady stopped polling over HTTP behind a proxy")
		}
	}
	answer.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitReady did not find the driver once it answered")
	}
}
