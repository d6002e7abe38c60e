// Package egress is a sandboxed browser's way out. A sandbox has a network
// namespace of its own whose only interface is its loopback; the hub listens
// on that loopback, at 127.0.0.1:3128 (Port), with an HTTP forward proxy
// (absolute-URI requests and CONNECT) that makes the browser's connections
// from the hub's own namespace, where Guard decides which destinations a
// session may reach. Env tells a browser to send everything, its loopback
// included, through it.
package egress

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Port is where the proxy listens on each sandbox's loopback: the loopback is
// the sandbox's alone, so the port is the same in every sandbox.
const Port = 3128

// MaxConns bounds the connections one sandbox holds open to its proxy at
// once; each may hold one connection out, so a session holds at most twice
// as many of the hub's descriptors. Chromium keeps at most 32 connections to
// a proxy, WebSockets aside, so a browser never waits on it; a page that
// opens sockets without end waits in the listener's backlog instead of
// taking the hub's descriptors.
const MaxConns = 256

// Timeouts of the proxy's connections.
const (
	// headerTimeout bounds how long a request's head may take to arrive.
	headerTimeout = 10 * time.Second
	// idleTimeout closes a browser's keep-alive connection, and a pooled
	// connection out, unused for that long.
	idleTimeout = 90 * time.Second
	// tunnelIdle closes a CONNECT tunnel through which nothing has passed,
	// either way, for that long: a WebSocket or a long poll keeps it open
	// by its traffic, an abandoned one goes.
	tunnelIdle = 5 * time.Minute
	// dialTimeout bounds one connection attempt out.
	dialTimeout = 30 * time.Second
)

// Env is the environment that sends a browser's traffic through the proxy:
// Chromium on Linux (outside a desktop session) reads all_proxy, and
// no_proxy "<-loopback>" takes away its rule that loopback is never proxied,
// as the sandbox's own loopback has nothing but the browser and its driver
// (chromedriver dials its browser itself, not through a proxy). http_proxy
// and https_proxy are for other programs.
//
// GLib's programs are kept off these variables (GIO_USE_PROXY_RESOLVER
// names GLib's resolver that connects directly): WebKitWebDriver reaches its
// browser's inspector on the sandbox's loopback through GLib, which would
// send that connection through the proxy, to the host's loopback, where no
// inspector is. WebKitGTK's MiniBrowser is told the proxy by its --proxy
// flag instead (URL), which covers its loopback too.
func Env() []string {
	u := URL().String()
	return []string{"all_proxy=" + u, "http_proxy=" + u, "https_proxy=" + u, "no_proxy=<-loopback>", "GIO_USE_PROXY_RESOLVER=dummy"}
}

// URL is the proxy's address as a browser inside a sandbox names it.
func URL() *url.URL {
	return &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(Port)}
}

// Proxy is one sandbox's proxy. Close ends it, with every connection.
type Proxy struct {
	guard *Guard
	srv   *http.Server
	tr    *http.Transport
	rp    *httputil.ReverseProxy
	slots chan struct{} // one per open browser connection, MaxConns in all

	mu      sync.Mutex
	closed  bool
	tunnels map[net.Conn]struct{} // both ends of every open tunnel
	wg      sync.WaitGroup        // the accept loop, each browser connection, each tunnel
	stop    chan struct{}         // closed by Close: an Accept waiting for a slot gives up
}

// Serve serves the proxy on ln, dialling through g, until Close; the proxy
// owns ln from then on.
func Serve(ln net.Listener, g *Guard) *Proxy {
	if g.Dialer.Timeout == 0 {
		gg := *g
		gg.Dialer.Timeout = dialTimeout
		g = &gg
	}
	p := &Proxy{guard: g, slots: make(chan struct{}, MaxConns), tunnels: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	quiet := log.New(io.Discard, "", 0) // every failure is answered to the browser
	p.tr = &http.Transport{
		Proxy:                 nil, // the hub's own proxy settings are not the sandbox's
		DialContext:           g.DialContext,
		MaxIdleConns:          64,
		IdleConnTimeout:       idleTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // the browser's Accept-Encoding goes out as it is
	}
	p.rp = &httputil.ReverseProxy{
		// The request is already absolute: it goes where it says, with
		// neither X-Forwarded-* nor the hop-by-hop headers.
		Rewrite:       func(*httputil.ProxyRequest) {},
		Transport:     p.tr,
		FlushInterval: -1, // streams and long polls go through as they come
		ErrorLog:      quiet,
		ErrorHandler:  p.failed,
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          quiet,
		ConnState:         p.connState,
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(&limited{Listener: ln, slots: p.slots, stop: p.stop})
	}()
	return p
}

// connState counts the server's connection goroutines, so that Close waits
// for them: a new connection is counted by the accept loop, before its
// goroutine starts, and a closed or hijacked one (a tunnel, counted on its
// own) is let go.
func (p *Proxy) connState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		p.wg.Add(1)
	case http.StateClosed, http.StateHijacked:
		p.wg.Done()
	}
}

// Close stops the proxy: the listener, every browser connection, every
// tunnel and every connection out are closed, and it returns once the
// goroutines that served them have.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close() // the listener and every connection not hijacked
	p.wg.Wait()
	p.tr.CloseIdleConnections()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// ServeHTTP proxies one request of the browser's.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, fmt.Sprintf("websummoner: this is the session's HTTP proxy: it takes absolute http:// URLs and CONNECT, not %s %q", r.Method, r.RequestURI), http.StatusBadRequest)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// failed answers a request that could not go out: 403 for a refused
// destination, 502 for one that did not answer.
func (p *Proxy) failed(w http.ResponseWriter, r *http.Request, err error) {
	var refused *RefusedError
	if errors.As(err, &refused) {
		http.Error(w, refused.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, fmt.Sprintf("websummoner: this session's proxy could not reach %s: %s", r.Host, why(err)), http.StatusBadGateway)
}

// why says what became of a connection out, in words a page may see: the
// error itself names the hub's own addresses and ports.
func why(err error) string {
	var ne net.Error
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the connection was closed before an answer"
	case errors.Is(err, errUnresolved), errors.As(err, &dns):
		return "the name does not resolve"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer in time"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to it"
	}
	return "the connection failed"
}

// tunnel answers CONNECT: it dials the destination, if allowed, and relays
// bytes both ways until either side ends or the tunnel idles for tunnelIdle.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	// Counted before the connection is hijacked, while the server still
	// counts it: once hijacked, this handler is its last user, and Close
	// waits for it.
	p.wg.Add(1)
	defer p.wg.Done()
	up, err := p.guard.DialContext(r.Context(), "tcp", r.Host)
	if err != nil {
		p.failed(w, r, err)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		http.Error(w, "websummoner: this session's proxy cannot take over the connection for CONNECT: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if !p.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	defer p.untrack(c, up)
	// The request's head is the server's to read and answer; the tunnel's
	// first line is the answer to CONNECT, written as the server would have.
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// What the browser sent after its CONNECT (a TLS hello) is in brw.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	relay(c, up, tunnelIdle)
}

// track registers a tunnel's two ends, for Close; false: the proxy is
// closed already.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.tunnels, c)
		c.Close()
	}
	p.mu.Unlock()
}

// relay copies a to b and b to a until both directions end (a side's end of
// writing is passed on as a half-close), one fails, or nothing passes either
// way for idle.
func relay(a, b net.Conn, idle time.Duration) {
	var last lastActive
	last.touch()
	done := make(chan error, 1)
	go func() { done <- pipe(b, a, idle, &last) }()
	err := pipe(a, b, idle, &last)
	if err != nil { // not a clean end: the other way goes too
		a.Close()
		b.Close()
	}
	if err2 := <-done; err2 != nil && err == nil {
		a.Close()
		b.Close()
	}
}

// lastActive is when bytes last went through a tunnel, either way.
type lastActive struct {
	mu sync.Mutex
	at time.Time
}

func (l *lastActive) touch() {
	l.mu.Lock()
	l.at = time.Now()
	l.mu.Unlock()
}

func (l *lastActive) since() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Since(l.at)
}

// pipe copies src to dst until src ends (nil, after passing the end on) or
// fails. A read that waits idle is retried while the other way has had
// traffic within idle, so a one-way stream keeps its tunnel.
func pipe(dst, src net.Conn, idle time.Duration, last *lastActive) error {
	buf := make([]byte, 32<<10)
	for {
		_ = src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			last.touch()
			_ = dst.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
		case err == io.EOF:
			closeWrite(dst)
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded) && last.since() < idle:
			// The other way is busy.
		default:
			return err
		}
	}
}

// closeWrite passes the end of one way on, or ends the connection when it
// cannot be half-closed.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// limited is a listener that holds at most cap(slots) connections open at
// once: an Accept waits for a connection to close, and the browser's next
// connection waits in the kernel's backlog.
type limited struct {
	net.Listener
	slots chan struct{}
	stop  <-chan struct{} // closed when the proxy is
}

func (l *limited) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.stop:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, slots: l.slots}, nil
}

// slotConn gives its slot back when closed. It keeps CloseWrite, which a
// tunnel uses to pass the browser's end of writing on.
type slotConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}

func (c *slotConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
