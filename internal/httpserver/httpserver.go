// Package httpserver is the hub's HTTP server: it bounds what an idle or slow
// connection may cost, raises the process's descriptor limit, sheds the
// connections that do no work when descriptors run short (so /status, /metrics
// and queued clients keep being served), serves TLS when asked, and holds the
// per-instance lock that keeps two hubs of one name apart.
package httpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/websummoner/websummoner/internal/logtag"
)

// Options configure the server. The zero value works.
type Options struct {
	// IdleTimeout is -idle-connection-timeout: a keep-alive connection with no
	// request for this long is closed. Zero: DefaultIdleTimeout.
	IdleTimeout time.Duration
	// BodyTimeout is -body-read-timeout: a request's body must arrive whole
	// within this long of its headers. Zero: DefaultBodyTimeout.
	BodyTimeout time.Duration
	// HeaderTimeout bounds reading a request's headers. Zero: 30s.
	HeaderTimeout time.Duration
	// TLSCert and TLSKey are -tls-cert and -tls-key: both set serves HTTPS.
	TLSCert, TLSKey string
	// FileLimit is the descriptor budget connections are shed against. Zero: the
	// process's RLIMIT_NOFILE, its soft limit first raised to the hard one.
	FileLimit int
	// Reserve is how many descriptors are kept free for work: when fewer are
	// left, connections that do no work are shed. Zero: 10% of the limit, at
	// least 16.
	Reserve int
	// NoFirstByteGate is -first-byte-gate=false: a connection goes to Go's
	// HTTP server as soon as it is accepted. False: it waits, at the cost of
	// its descriptor alone, until its client sends something (gate.go).
	NoFirstByteGate bool
}

// Defaults for zero Options.
const (
	DefaultIdleTimeout = 2 * time.Minute
	DefaultBodyTimeout = time.Minute
)

// Validate says which flag holds a value the server cannot work with.
func (o Options) Validate() error {
	switch {
	case o.IdleTimeout < 0:
		return fmt.Errorf("-idle-connection-timeout must be a positive duration such as 2m (got %v)", o.IdleTimeout)
	case o.BodyTimeout < 0:
		return fmt.Errorf("-body-read-timeout must be a positive duration such as 60s (got %v)", o.BodyTimeout)
	case (o.TLSCert == "") != (o.TLSKey == ""):
		return errors.New("-tls-cert and -tls-key go together: give both to serve HTTPS, or neither")
	}
	if o.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey); err != nil {
			return fmt.Errorf("-tls-cert %s / -tls-key %s: %v", o.TLSCert, o.TLSKey, err)
		}
	}
	return nil
}

// Server serves one handler on one listener.
type Server struct {
	opts  Options
	log   *slog.Logger
	srv   *http.Server
	limit int // the descriptor soft limit after raising it

	mu    sync.Mutex
	conns map[net.Conn]*conn
	gate  *gate                   // nil before Serve
	side  map[*sheddable]struct{} // taken-over connections that may be shed
}

// conn is what the server knows of one connection.
type conn struct {
	c       net.Conn
	state   http.ConnState
	since   time.Time // when it entered state
	reading bool      // a request body is still arriving
	readAt  time.Time // when that body began
	srv     *Server   // for Rehold
}

type connKey struct{}

// Rehold returns a function that gives a connection hijacked from a request
// this package's Server is serving back to that Server, to wait for the
// connection's next request as an idle keep-alive connection does (closed
// after IdleTimeout, shed first when descriptors run short). A handler that
// answers a request by hand after a long wait (the hub's queued new-session
// requests) keeps the client's connection this way instead of closing it.
// It is nil when the server cannot take the connection back: a TLS
// connection, or a request another server is serving. The caller must not
// touch the connection after handing it back, and must hand back only a
// connection with no bytes of a next request already read from it.
func Rehold(ctx context.Context) func(net.Conn) {
	info, _ := ctx.Value(connKey{}).(*conn)
	if info == nil || info.srv == nil {
		return nil
	}
	if _, ok := info.c.(*tls.Conn); ok {
		return nil // the gate hands the HTTP server raw connections, which it wraps
	}
	return info.srv.rehold
}

func (s *Server) rehold(c net.Conn) {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g == nil {
		_ = c.Close()
		return
	}
	g.hold(c, s.opts.IdleTimeout)
}

// New returns a server for h; it raises the descriptor soft limit to the hard
// one first.
func New(opts Options, h http.Handler, logger *slog.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.BodyTimeout == 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.HeaderTimeout == 0 {
		opts.HeaderTimeout = 30 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: logger, conns: map[net.Conn]*conn{}, side: map[*sheddable]struct{}{}, limit: RaiseFileLimit()}
	if opts.FileLimit > 0 {
		s.limit = min(s.limit, opts.FileLimit)
	}
	if s.opts.Reserve == 0 {
		s.opts.Reserve = max(s.limit/10, 16)
	}
	s.srv = &http.Server{
		Handler:           s.bodyDeadline(h),
		ReadHeaderTimeout: opts.HeaderTimeout,
		IdleTimeout:       opts.IdleTimeout,
		ConnState:         s.track,
		// ConnContext runs before the StateNew hook: the record is made here.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			info := &conn{c: c, state: http.StateNew, since: time.Now(), srv: s}
			s.mu.Lock()
			s.conns[c] = info
			s.mu.Unlock()
			return context.WithValue(ctx, connKey{}, info)
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// RaiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit and returns
// the soft limit in force.
func RaiseFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 1024
	}
	if l.Cur < l.Max {
		raised := l
		raised.Cur = l.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			l = raised
		}
	}
	return int(min(l.Cur, 1<<30))
}

// FileLimit is the descriptor limit the server works within.
func (s *Server) FileLimit() int { return s.limit }

// Serve serves on ln until Shutdown; TLS when configured. A connection reaches
// the HTTP server once its client has sent something (gate.go).
func (s *Server) Serve(ln net.Listener) error {
	g := newGate(ln, s.opts.HeaderTimeout, s.gateHeld, !s.opts.NoFirstByteGate)
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	ln = g
	var err error
	if s.opts.TLSCert != "" {
		err = s.srv.ServeTLS(ln, s.opts.TLSCert, s.opts.TLSKey)
	} else {
		err = s.srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting and waits, until ctx ends, for handlers to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.srv.Shutdown(ctx)
}

func (s *Server) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	switch st {
	case http.StateNew:
		if s.conns[c] == nil {
			s.conns[c] = &conn{c: c, state: st, since: time.Now()}
		}
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	default:
		if info := s.conns[c]; info != nil {
			info.state, info.since = st, time.Now()
		}
	}
	n := len(s.conns) + len(s.side)
	g := s.gate
	s.mu.Unlock()
	if g != nil && st != http.StateNew && st != http.StateActive {
		// The first request is done (idle, hijacked, closed): the gate may
		// hand over the next arrival.
		raw := c
		if tc, ok := c.(*tls.Conn); ok {
			raw = tc.NetConn()
		}
		g.arrived(raw)
	}
	if st == http.StateNew && g != nil {
		n += g.count()
	}
	if st == http.StateNew && n >= s.limit-s.opts.Reserve {
		s.shed()
	}
}

// gateHeld is told how many connections the gate holds after an accept, or -1
// when accepting failed for want of descriptors: both may call for shedding.
func (s *Server) gateHeld(held int) {
	s.mu.Lock()
	n := len(s.conns) + len(s.side)
	s.mu.Unlock()
	if held < 0 || n+held >= s.limit-s.opts.Reserve {
		s.shed()
	}
}

// shed closes the connections that do no work, so that descriptors go to those
// that do: idle keep-alive connections, connections that have sent nothing or
// no complete headers for a second, requests whose body has trickled for a
// second, and every registered watcher (Sheddable); then, newest first, as
// many registered workers as it takes to get back under the reserve. Queued
// clients, whose bodies are read, and running commands are kept.
func (s *Server) shed() {
	now := time.Now()
	shedHeld := 0
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		shedHeld = g.shed(now.Add(-time.Second))
	}
	s.mu.Lock()
	var victims []*conn
	for _, c := range s.conns {
		switch {
		case c.state == http.StateIdle,
			c.state == http.StateNew && now.Sub(c.since) > time.Second,
			c.state == http.StateActive && c.reading && now.Sub(c.readAt) > time.Second:
			victims = append(victims, c)
		}
	}
	s.mu.Unlock()
	sort.Slice(victims, func(i, j int) bool { return victims[i].since.Before(victims[j].since) })
	for _, c := range victims {
		_ = c.c.Close()
	}
	side := s.shedSide(len(victims), g)
	if n := len(victims) + shedHeld; n > 0 || side > 0 {
		logtag.Event(s.log, slog.LevelWarn, "", "CONNECTIONS_SHED", fmt.Sprintf("%d idle or slow connections closed", n),
			fmt.Sprintf("%d side-channel sockets closed", side), fmt.Sprintf("descriptors near the limit of %d", s.limit))
	}
}

// shedSide closes every registered watcher, then the newest workers while the
// connections left (closed ones not counted) are still within the reserve; it
// returns how many it closed.
func (s *Server) shedSide(closed int, g *gate) int {
	held := 0
	if g != nil {
		held = g.count()
	}
	s.mu.Lock()
	n := len(s.conns) - closed + len(s.side) + held
	var workers, victims []*sheddable
	for sc := range s.side {
		if sc.rank == ShedWatcher {
			victims = append(victims, sc)
			delete(s.side, sc)
			n--
		} else {
			workers = append(workers, sc)
		}
	}
	// Newest first: a client's long-standing DevTools connection outlasts a
	// flood of new ones.
	sort.Slice(workers, func(i, j int) bool { return workers[i].since.After(workers[j].since) })
	for _, sc := range workers {
		if n < s.limit-s.opts.Reserve {
			break
		}
		victims = append(victims, sc)
		delete(s.side, sc)
		n--
	}
	s.mu.Unlock()
	for _, sc := range victims {
		sc.close()
	}
	return len(victims)
}

// ShedRank says how readily a connection registered with Sheddable is shed
// when descriptors run short.
type ShedRank int

const (
	// ShedWatcher is a connection its client only watches through (a live log
	// or a screen): every one is closed when descriptors run short, with the
	// idle connections.
	ShedWatcher ShedRank = iota
	// ShedWorker is a connection its client works through (a DevTools or BiDi
	// socket): closed, newest first, only as many as it takes to get back
	// under the reserve once the idle connections and watchers are gone.
	ShedWorker
)

// sheddable is a connection registered with Sheddable.
type sheddable struct {
	rank  ShedRank
	since time.Time
	close func()
}

// Sheddable registers a long-lived connection of the request ctx belongs to
// (a WebSocket hijacked from it, or an endless streamed answer) with the
// Server serving that request, which counts it against the descriptor limit
// and may call close to end it when descriptors run short; close must make
// the connection's handler end and its descriptors close, and be harmless
// once the connection has ended: it is called at most once, possibly as done
// runs. Call done when the connection ends. A request no Server of this
// package serves registers nothing, and done does nothing.
func Sheddable(ctx context.Context, rank ShedRank, close func()) (done func()) {
	info, _ := ctx.Value(connKey{}).(*conn)
	if info == nil || info.srv == nil {
		return func() {}
	}
	s := info.srv
	sc := &sheddable{rank: rank, since: time.Now(), close: close}
	s.mu.Lock()
	s.side[sc] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.side, sc)
		s.mu.Unlock()
	}
}

// bodyDeadline bounds the arrival of each request's body by BodyTimeout, and
// marks the connection as reading until the body ends, for shed.
func (s *Server) bodyDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		info, _ := r.Context().Value(connKey{}).(*conn)
		b := &deadlineBody{ReadCloser: r.Body, s: s, rc: http.NewResponseController(w), info: info}
		b.RestartTimeout()
		r.Body = b
		h.ServeHTTP(w, r)
		b.mu.Lock()
		b.returned = true
		b.mu.Unlock()
	})
}

func (s *Server) setReading(c *conn, on bool) {
	if c == nil {
		return
	}
	s.mu.Lock()
	c.reading = on
	if on {
		c.readAt = time.Now()
	}
	s.mu.Unlock()
}

// deadlineBody calls done once: whole at EOF, not whole on an error or a close
// before the end.
type deadlineBody struct {
	io.ReadCloser
	s    *Server
	rc   *http.ResponseController
	info *conn
	once sync.Once
	// ended: the body's watch is over (done); the clock is not started again.
	ended atomic.Bool

	// mu orders deadlines with the handler's return: the body may be read
	// to its end after it (a Transport still writing it to a driver), and
	// HTTP/2 lets the stream's writer go then.
	mu       sync.Mutex
	returned bool
}

// setDeadline sets the body's read deadline while its handler runs.
func (b *deadlineBody) setDeadline(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.returned {
		_ = b.rc.SetReadDeadline(t)
	}
}

// PauseTimeout stops the body's clock, for a handler that makes the body
// wait its turn before reading it (the hub's upload budget): a deadline
// that passed meanwhile would end an HTTP/2 body for good, and a connection
// reading slowly is shed first near the descriptor limit. RestartTimeout
// starts it again.
func (b *deadlineBody) PauseTimeout() {
	if b.ended.Load() {
		return
	}
	b.setDeadline(time.Time{})
	b.s.setReading(b.info, false) // waiting, not trickling: not shed as a slow body
}

// RestartTimeout gives the body the whole BodyTimeout from now, and marks
// its connection as reading: bodyDeadline starts the clock at the headers,
// and a handler that makes a body wait its turn before reading it (the
// hub's upload budget) starts it again, so that the wait is not charged to
// the client. Once the body is read or closed, it does nothing: a deadline
// then would cut the connection the server watches for the client leaving,
// and take it for gone.
func (b *deadlineBody) RestartTimeout() {
	if b.ended.Load() {
		return
	}
	b.setDeadline(time.Now().Add(b.s.opts.BodyTimeout))
	b.s.setReading(b.info, true)
}

// done ends the body's watch: the connection is no longer reading. A body
// read whole is read without a deadline again: the wait that may follow
// (the queue) needs the connection watched for the client leaving, not cut.
// Otherwise the deadline stays: the server's discard of what is left of a
// broken body must fail fast too.
func (b *deadlineBody) done(whole bool) {
	b.ended.Store(true)
	b.s.setReading(b.info, false)
	if whole {
		b.setDeadline(time.Time{})
	}
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(func() { b.done(err == io.EOF) })
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	b.once.Do(func() { b.done(false) })
	return b.ReadCloser.Close()
}

// Lock is the per-instance lock: an abstract unix socket named after the
// instance, released by the kernel when the process ends, however it ends.
type Lock struct{ ln net.Listener }

// LockInstance takes the lock of instance, or says which hub holds it.
func LockInstance(instance string) (*Lock, error) {
	ln, err := net.Listen("unix", "@websummoner-instance/"+instance)
	if err != nil {
		return nil, fmt.Errorf("another hub with -instance %q is running on this host (%v); it would sweep this one's browsers and this one its: give each hub its own -instance", instance, err)
	}
	return &Lock{ln: ln}, nil
}

// Release gives the lock up.
func (l *Lock) Release() { _ = l.ln.Close() }
