package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
	ctx, cancel = context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	if err := WaitReady(ctx, client, base, nil); err != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	if err := WaitListening(ctx, client, base, nil, func() (bool, bool) {
		asked++
		return asked > 3, true
	}, nil); err != nil {
		t.Fatal(err)
	}
	if asked != 4 || ct.polls.Load() != 1 || accepted.Load() != 1 {
		t.Fatalf("asked %d times, %d polls, %d connections; want 4, 1, 1", asked, ct.polls.Load(), accepted.Load())
	}
	if err := WaitListening(ctx, client, base, nil, func() (bool, bool) { return false, false }, nil); err != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	go func() { done <- WaitReady(ctx, client, base, nil) }()
	for range 3 { // three HTTP polls while the "proxy" closes on them
		select {
		case <-ct.seen:
		case err := <-done:
			t.Fatalf("WaitReady returned %v before the driver answered", err)
		case <-time.After(hangBound):
			t.Fatal("WaitReady stopped polling over HTTP behind a proxy")
		}
	}
	answer.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangBound):
		t.Fatal("WaitReady did not find the driver once it answered")
	}
}

// hangBound bounds the waits on real sockets above, so that a hang fails the
// test instead of holding the suite; it is no measure of how fast they are.
const hangBound = time.Minute

// answerAll is a RoundTripper answering every request 200 in memory: the
// poll is not what the fake-clock tests below test, and a socket would not
// let their clock stand still.
type answerAll struct{}

func (answerAll) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
}

// waiting is a WaitListening run, in a synctest bubble, for a driver the
// kernel says listens once listening is set; asked counts the kernel's looks.
type waiting struct {
	listening atomic.Bool
	asked     atomic.Int32
	took      time.Duration // from the start to the wait's end
	done      chan error
}

func startWaiting(ctx context.Context, said Said) *waiting {
	w := &waiting{done: make(chan error, 1)}
	base, _ := url.Parse("http://127.0.0.1:1")
	t0 := time.Now()
	go func() {
		err := WaitListening(ctx, &http.Client{Transport: answerAll{}}, base, nil, func() (bool, bool) {
			w.asked.Add(1)
			return w.listening.Load(), true
		}, said)
		w.took = time.Since(t0)
		w.done <- err
	}()
	return w
}

// A driver that writes to its output is looked at then, not at the next
// millisecond's look: a driver listening 5.5 ms in and saying so is found at
// 5.5 ms (6 ms without said), and words before it listens cost one look each
// and change nothing else.
func TestWaitListeningLooksWhenTheDriverSpeaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		said := NewSaid()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // a failed test's wait ends too
		w := startWaiting(ctx, said)
		time.Sleep(2300 * time.Microsecond)
		synctest.Wait()
		before := w.asked.Load() // at once, then at 1 and 2 ms
		fmt.Fprintln(said, "Starting the driver")
		synctest.Wait()
		if got := w.asked.Load(); got != before+1 || before != 3 {
			t.Fatalf("looks: %d before the driver spoke, %d after; want 3, then one more at once", before, got)
		}
		time.Sleep(3200 * time.Microsecond) // looks at 3.3, 4.3 and 5.3 ms
		w.listening.Store(true)
		fmt.Fprintln(said, "listening on 127.0.0.1:1")
		synctest.Wait()
		select {
		case err := <-w.done:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("WaitListening did not look when the driver said it listens")
		}
		if w.took != 5500*time.Microsecond {
			t.Fatalf("found listening after %v, want 5.5ms (when it said so)", w.took)
		}
	})
}

// stuckOnce is a RoundTripper whose first poll hangs until its context ends
// (a driver, or Docker's port proxy, that accepts and never answers) and
// whose later polls are answered.
type stuckOnce struct{ polls atomic.Int32 }

func (s *stuckOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.polls.Add(1) == 1 {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return answerAll{}.RoundTrip(r)
}

// One poll that never gets an answer is given up after pollTimeout, and the
// next poll finds the driver: a stuck poll costs 2 s of the start-up budget,
// not all of it.
func TestWaitListeningGivesUpAStuckPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &stuckOnce{}
		base, _ := url.Parse("http://127.0.0.1:1")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t0 := time.Now()
		err := WaitListening(ctx, Options{ReadyTransport: rt}.ReadyClient(), base, nil, func() (bool, bool) { return true, true }, nil)
		if err != nil {
			t.Fatalf("WaitListening: %v (after %v)", err, time.Since(t0))
		}
		if took := time.Since(t0); took < pollTimeout || took > pollTimeout+10*time.Millisecond || rt.polls.Load() != 2 {
			t.Fatalf("found after %v and %d polls; want %v (one stuck poll) and 2", took, rt.polls.Load(), pollTimeout)
		}
	})
}

// A driver that writes without pause costs at most one extra look a round:
// a hundred writes before the next millisecond's look add one look, not a
// hundred.
func TestWaitListeningBoundsTheLooksWordsAsk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		said := NewSaid()
		ctx, cancel := context.WithCancel(context.Background())
		w := startWaiting(ctx, said) // a driver that never listens
		time.Sleep(500 * time.Microsecond)
		synctest.Wait()
		before := w.asked.Load() // the look at once
		for range 100 {
			fmt.Fprintln(said, "a chatty driver")
			synctest.Wait()
		}
		if got := w.asked.Load() - before; got != 1 {
			t.Errorf("a hundred writes within a round asked for %d looks, want 1", got)
		}
		// Rounds of 1 ms, each with a tick's look and at most one asked for.
		for range 20 {
			time.Sleep(100 * time.Microsecond)
			fmt.Fprintln(said, "a chatty driver")
			synctest.Wait()
		}
		if got := w.asked.Load() - before; got > 1+2*2+1 {
			t.Errorf("2 ms of writes every 100 µs: %d looks, want at most 6 (two rounds, two each)", got)
		}
		cancel()
		if err := <-w.done; !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	})
}
