package httpserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// A Lane is a keep-alive connection a handler took over from Go's HTTP server
// to serve the connection's next requests itself, for as long as they are
// ones it knows (the hub's WebDriver commands), and to give the connection
// back, with the bytes of the first request it does not know, for the HTTP
// server to serve as a new connection.
//
// Why: per request Go's server starts a goroutine for a background read (one
// read(2) that finds nothing, a wake-up and a hand-off back) and looks for the
// next request with a read that finds nothing; on a 2-core VM whose system
// calls cost 1–1.5 µs that is 12 µs a request at one P and 25 at two
// (BenchmarkServerLoop), a quarter of what the hub adds to a command.
//
// The server still counts a lane's connection: it is idle between requests
// (closed after IdleTimeout, shed first when descriptors run short, closed by
// Shutdown) and active while it serves one (Shutdown waits for it).
type Lane struct {
	s    *Server
	c    net.Conn
	br   *bufio.Reader
	info *conn
	// await writes the end of an answer and waits for the next request without
	// a read that finds nothing (rawio.Conn.WriteAwaitRead); nil without it.
	await func([]byte) (int, error)

	// The hang-up watch of a request that takes a while (Watch).
	watchTimer *time.Timer
	watchDone  chan struct{}
	cancel     context.CancelFunc
	ended      bool // closed or handed back
}

// watchAfter is how long a lane's request runs before the lane watches its
// client for a hang-up: a plain command is answered sooner, and the look costs
// a goroutine and a read; a hang-up during a long one (a page loading) is
// noticed this long after the command began at the latest.
const watchAfter = 20 * time.Millisecond

// errLaneEnds is why a lane ends when its server shuts down.
var errLaneEnds = errors.New("the server is shutting down")

// TakeLane hijacks r's connection for a lane once the handler has written a
// whole answer whose length it declared (Content-Length); the answer is sent
// first. It returns nil, and leaves w alone, when the connection cannot be a
// lane: served by another server, TLS, not HTTP/1.1, closing after this
// answer, or the server shutting down.
func TakeLane(w http.ResponseWriter, r *http.Request) *Lane {
	info, _ := r.Context().Value(connKey{}).(*conn)
	if info == nil || info.srv == nil || r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Close {
		return nil
	}
	if _, ok := info.c.(*tls.Conn); ok {
		return nil
	}
	s := info.srv
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	hj, ok := w.(http.Hijacker)
	fl, ok2 := w.(http.Flusher)
	if closing || !ok || !ok2 {
		return nil
	}
	fl.Flush()
	c, rw, err := hj.Hijack()
	if err != nil {
		return nil
	}
	if pc, ok := c.(*prefixConn); ok && len(pc.prefix) == 0 {
		c = pc.Conn // handed back before and all of it read: the raw connection again
	}
	l := &Lane{s: s, c: c, br: rw.Reader, watchDone: make(chan struct{}, 1),
		info: &conn{c: c, state: http.StateActive, since: time.Now(), srv: s, lane: true}}
	if aw, ok := c.(interface{ WriteAwaitRead([]byte) (int, error) }); ok {
		l.await = aw.WriteAwaitRead
	}
	l.watchTimer = time.AfterFunc(time.Hour, l.watch)
	l.watchTimer.Stop()
	s.mu.Lock()
	s.conns[c] = l.info
	s.lanes++
	s.mu.Unlock()
	return l
}

// Reader is the connection's buffered reader: the next request's bytes, those
// Go's server read ahead included.
func (l *Lane) Reader() *bufio.Reader { return l.br }

// Write writes part of an answer.
func (l *Lane) Write(p []byte) (int, error) { return l.c.Write(p) }

// Wait waits, idle, for the next request's first bytes. It returns nil once
// they are there, or why the lane is to end (the idle timeout, a hang-up, a
// shed, Shutdown).
func (l *Lane) Wait() error { return l.Finish(nil) }

// Finish writes the end of an answer (p, which may be empty) and waits, idle,
// for the next request as Wait does. When the client has no next request
// waiting, the write and the wait are one (rawio's WriteAwaitRead): no read
// that finds nothing.
func (l *Lane) Finish(p []byte) error {
	if !l.setState(http.StateIdle) {
		if len(p) > 0 {
			_, _ = l.c.Write(p)
		}
		return errLaneEnds
	}
	_ = l.c.SetReadDeadline(time.Now().Add(l.s.opts.IdleTimeout))
	if len(p) > 0 {
		var err error
		if l.await != nil && l.br.Buffered() == 0 {
			_, err = l.await(p)
		} else {
			_, err = l.c.Write(p)
		}
		if err != nil {
			return err
		}
	}
	if _, err := l.br.Peek(1); err != nil {
		return err
	}
	if !l.setState(http.StateActive) {
		return errLaneEnds
	}
	// The head must come whole within HeaderTimeout of its first bytes.
	return l.c.SetReadDeadline(time.Now().Add(l.s.opts.HeaderTimeout))
}

// More waits for more of a request's head than the reader holds; the header
// deadline Finish set bounds it.
func (l *Lane) More() error {
	_, err := l.br.Peek(l.br.Buffered() + 1)
	return err
}

// ReadBody reads a request body of n bytes into p (len(p) == n) within
// BodyTimeout.
func (l *Lane) ReadBody(p []byte) error {
	s := l.s
	s.mu.Lock()
	l.info.reading, l.info.readAt = true, time.Now()
	s.mu.Unlock()
	_ = l.c.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	_, err := readFull(l.br, p)
	s.mu.Lock()
	l.info.reading = false
	s.mu.Unlock()
	return err
}

func readFull(br *bufio.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := br.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Watch calls cancel if the client hangs up while the request runs, looking
// once the request has run for watchAfter; Unwatch must follow before the
// answer is written and before the reader is used again.
func (l *Lane) Watch(cancel context.CancelFunc) {
	_ = l.c.SetReadDeadline(time.Time{})
	l.cancel = cancel
	l.watchTimer.Reset(watchAfter)
}

// Unwatch ends Watch's watch.
func (l *Lane) Unwatch() {
	if l.watchTimer.Stop() {
		return
	}
	// The look began (or is about to): a deadline in the past ends it.
	_ = l.c.SetReadDeadline(time.Unix(1, 0))
	<-l.watchDone
	_ = l.c.SetReadDeadline(time.Time{})
}

// watch is the look for a hang-up, on the timer's goroutine: a read that
// waits in the poller. Bytes are the client's next request (pipelined), left
// in the reader; the end of the stream or an error is the client gone.
func (l *Lane) watch() {
	_, err := l.br.Peek(1)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		l.cancel()
	}
	l.watchDone <- struct{}{}
}

// HandBack gives the connection back to the HTTP server, with the bytes of
// the next request read so far, to serve as a new connection. The lane must
// not be used after.
func (l *Lane) HandBack() {
	if l.ended {
		return
	}
	l.ended = true
	n := l.br.Buffered()
	prefix := make([]byte, n)
	copy(prefix, mustPeek(l.br, n))
	l.forget()
	_ = l.c.SetReadDeadline(time.Time{})
	l.s.mu.Lock()
	g := l.s.gate
	l.s.mu.Unlock()
	if g == nil {
		_ = l.c.Close()
		return
	}
	var c net.Conn = l.c
	if n > 0 {
		c = &prefixConn{Conn: l.c, prefix: prefix}
	}
	g.give(c)
}

func mustPeek(br *bufio.Reader, n int) []byte {
	b, _ := br.Peek(n)
	return b
}

// Close closes the connection, unless it was handed back.
func (l *Lane) Close() {
	if l.ended {
		return
	}
	l.ended = true
	l.watchTimer.Stop()
	l.forget()
	_ = l.c.Close()
}

func (l *Lane) forget() {
	s := l.s
	s.mu.Lock()
	if s.conns[l.c] == l.info {
		delete(s.conns, l.c)
	}
	s.lanes--
	s.mu.Unlock()
	s.laneEvent()
}

// setState records the lane idle or active; false, and the state left as it
// was, when the server is shutting down. A lane that is answering must not be
// seen idle then: Shutdown closes idle lanes, and the answer would be cut off.
// It ends instead, after its answer, and its end (forget) tells Shutdown.
func (l *Lane) setState(st http.ConnState) bool {
	s := l.s
	s.mu.Lock()
	closing := s.closing
	if !closing {
		l.info.state, l.info.since = st, time.Now()
	}
	s.mu.Unlock()
	return !closing
}

// laneEvent tells a Shutdown waiting for lanes that one went idle or ended.
func (s *Server) laneEvent() {
	select {
	case s.laneEvents <- struct{}{}:
	default:
	}
}

// shutdownLanes closes idle lanes until none is left or ctx ends; an active
// lane ends after its answer.
func (s *Server) shutdownLanes(ctx context.Context) error {
	for {
		s.mu.Lock()
		var idle []net.Conn
		for c, info := range s.conns {
			if info.lane && info.state == http.StateIdle {
				idle = append(idle, c)
			}
		}
		n := s.lanes
		s.mu.Unlock()
		for _, c := range idle {
			_ = c.Close()
		}
		if n == 0 {
			return nil
		}
		select {
		case <-s.laneEvents:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// prefixConn is a connection handed back by a lane: the bytes the lane read
// of the next request come first.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// SyscallConn is the connection's, for watches that wait in the poller; it is
// only right once the prefix is read, which Rehold's callers ensure.
func (c *prefixConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("no descriptor")
	}
	return sc.SyscallConn()
}

// unwrap is c without its prefixConn once the prefix is read.
func unwrap(c net.Conn) net.Conn {
	if pc, ok := c.(*prefixConn); ok && len(pc.prefix) == 0 {
		return pc.Conn
	}
	return c
}
