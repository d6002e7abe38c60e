package httpserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/logtest"
)

// Side channels registered as Sheddable count against the descriptor limit,
// and near it every watcher (log and screen viewers) is closed, then only as
// many workers (DevTools, BiDi), newest first, as it takes to get back under
// the reserve; /status keeps being served.
func TestShedsSideChannelsNearTheLimit(t *testing.T) {
	registered := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rank := ShedWorker
		if r.URL.Path == "/watch" {
			rank = ShedWatcher
		} else if r.URL.Path != "/work" {
			fmt.Fprint(w, "ok")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		done := Sheddable(r.Context(), rank, func() { c.Close() })
		defer done()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		registered <- struct{}{}
		_, _ = io.Copy(io.Discard, c)
	})
	ev, log := logtest.New(100)
	s, err := New(Options{FileLimit: 1000, Reserve: 100}, h, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	addr := ln.Addr().String()
	open := func(path string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n", path)
		<-registered
		return c
	}
	// limit sets the descriptor budget, as if the process could open only so many.
	limit := func(n, reserve int) {
		s.mu.Lock()
		s.limit, s.opts.Reserve = n, reserve
		s.mu.Unlock()
	}
	// closed says whether the server closed c: its answer head, then EOF.
	closed := func(c net.Conn, wait time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(wait))
		_, err := io.Copy(io.Discard, c)
		return !errors.Is(err, os.ErrDeadlineExceeded)
	}
	var watchers, workers []net.Conn
	for range 4 {
		watchers = append(watchers, open("/watch"))
		workers = append(workers, open("/work"))
	}
	limit(12, 4) // 8 registered of 12, 4 kept free: at the edge
	s.shed()
	for i, c := range watchers {
		if !closed(c, 5*time.Second) {
			t.Fatalf("watcher %d was not shed near the limit", i)
		}
	}
	for i, c := range workers {
		if closed(c, 100*time.Millisecond) {
			t.Fatalf("worker %d was shed though closing the watchers was enough", i)
		}
	}

	limit(1000, 100)
	for range 6 {
		workers = append(workers, open("/work"))
	}
	limit(12, 4) // 10 workers: the 3 newest go, 7 stay under the 8 allowed
	s.shed()
	for i, c := range workers {
		if want := i >= 7; closed(c, map[bool]time.Duration{true: 5 * time.Second, false: 100 * time.Millisecond}[want]) != want {
			t.Fatalf("worker %d of 10: shed %v, want %v (the newest first, only as many as needed)", i, !want, want)
		}
	}

	// 7 workers and one new client reach the 8 allowed: the newest worker goes
	// and the client is served.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	r, err := client.Get("http://" + addr + "/status")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("/status near the limit: %v %v", r, err)
	}
	r.Body.Close()
	if !closed(workers[6], 5*time.Second) {
		t.Fatal("side channels are not counted against the descriptor limit: a new client at the edge shed nothing")
	}
	if line := ev.Wait(t, "CONNECTIONS_SHED", 5*time.Second); !strings.Contains(line, "side-channel sockets closed") {
		t.Fatalf("the shedding line does not say side channels were closed: %s", line)
	}
}
