package hub

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/websummoner/websummoner/internal/rawio"
)

// wire is the hub's HTTP/1.1 client for commands to drivers, used instead of
// http.Transport on the per-command path. It does one request on the calling
// goroutine — write, then read the answer straight into the client's
// ResponseWriter — where http.Transport hands each request to two goroutines
// of its own and builds a Response: on this 2-core machine those hand-offs
// and allocations were most of what the hub added to a command. Requests with
// bodies over wireMaxBody, or of unknown length, take the Transport.
type wire struct {
	dial  DialFunc
	mu    sync.Mutex
	idle  map[string][]*wireConn // by host:port, most recent last
	total int                    // idle connections in all
	swept time.Time              // the last drop of aged connections
}

// wireMaxBody bounds the request bodies the wire buffers (so that a request
// can be sent again on a fresh connection when an idle one turns out closed).
const (
	wireMaxBody     = 64 << 10
	wireIdlePerHost = 8
	// wireIdleTotal bounds the idle connections kept: sessions end by paths
	// that do not tell the wire (idle timeout, crash), so connections to
	// drivers that are gone are dropped by age once the pool is full.
	wireIdleTotal = 256
	wireIdleAge   = 30 * time.Second
)

type wireConn struct {
	c  net.Conn
	rc syscall.RawConn // nil when c has no descriptor
	// peek is closedByDriver's look, bound once per connection so that a
	// command allocates nothing for it; it sets dead.
	peek  func(fd uintptr) bool
	dead  bool
	peekB [1]byte
	br    *bufio.Reader
	lim   headLimit // under br
	// req is the request being sent, kept between requests up to
	// wireKeepReq bytes; send writes it and, on a rawio.Conn, returns once
	// the answer is there to read (WriteAwaitRead: no read(2) that finds
	// nothing first).
	req   []byte
	body  io.LimitedReader // an answer's body of declared length, under br
	abort func()           // ends a blocked read or write: the client left
	send  func([]byte) (int, error)
	since time.Time // idle since
}

// wireKeepReq bounds the request buffer a connection keeps; a body larger
// than wireInlineBody is written after the head, not copied behind it.
const (
	wireKeepReq    = 8 << 10
	wireInlineBody = 4 << 10
)

func newWire() *wire { return newWireDial(nil) }

// newWireDial is newWire dialling through dial (nil: a plain net.Dialer).
func newWireDial(dial DialFunc) *wire {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return &wire{dial: dial, idle: map[string][]*wireConn{}}
}

func (wr *wire) get(ctx context.Context, host string) (*wireConn, bool, error) {
	for {
		wr.mu.Lock()
		list := wr.idle[host]
		if len(list) == 0 {
			wr.mu.Unlock()
			break
		}
		c := list[len(list)-1]
		list[len(list)-1] = nil
		// An emptied list is kept for the connection's return (put) to
		// reuse; a connection closed instead drops it (dropEmpty), and
		// closeIdle does when the driver goes.
		wr.idle[host] = list[:len(list)-1]
		wr.total--
		wr.mu.Unlock()
		if c.closedByDriver() {
			c.c.Close()
			continue
		}
		return c, true, nil
	}
	c, err := wr.dial(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	c = rawio.Wrap(c) // see the package: a command's reads and writes keep their P
	wc := &wireConn{c: c, req: make([]byte, 0, 512), send: c.Write}
	wc.abort = func() { _ = c.SetDeadline(time.Unix(1, 0)) } // made once, not a command
	wc.lim = headLimit{r: c, left: -1}
	wc.br = bufio.NewReaderSize(&wc.lim, 4096)
	if aw, ok := c.(interface{ WriteAwaitRead([]byte) (int, error) }); ok {
		wc.send = aw.WriteAwaitRead
	}
	if sc, ok := c.(syscall.Conn); ok {
		wc.rc, _ = sc.SyscallConn()
		wc.peek = wc.look
	}
	return wc, false, nil
}

// closedByDriver says whether an idle connection was closed (or reset) by the
// driver, or has bytes nobody asked for: a look without waiting (MSG_PEEK,
// MSG_DONTWAIT), one system call. A command must not be sent on such a
// connection: only a request that is safe to repeat may be sent again when a
// connection breaks before its answer, since the driver may have carried it
// out (a click, a window closed).
func (c *wireConn) closedByDriver() bool {
	if c.br.Buffered() > 0 {
		return true
	}
	if c.rc == nil {
		return false
	}
	c.dead = false
	_ = c.rc.Read(c.peek)
	return c.dead
}

func (c *wireConn) look(fd uintptr) bool {
	// Raw, as the connection's reads and writes are (package rawio): a look
	// that cannot wait needs none of the scheduler's system-call path.
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&c.peekB[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	c.dead = e != syscall.EAGAIN && e != syscall.EINTR // bytes, the driver's close, or an error
	return true
}

func (wr *wire) put(host string, c *wireConn) {
	now := time.Now()
	c.since = now
	var drop []*wireConn
	wr.mu.Lock()
	if wr.total >= wireIdleTotal && now.Sub(wr.swept) > time.Second {
		wr.swept = now
		for h, list := range wr.idle {
			kept := list[:0]
			for _, ic := range list {
				if now.Sub(ic.since) > wireIdleAge {
					drop = append(drop, ic)
					wr.total--
				} else {
					kept = append(kept, ic)
				}
			}
			if len(kept) == 0 {
				delete(wr.idle, h)
			} else {
				wr.idle[h] = kept
			}
		}
	}
	if len(wr.idle[host]) < wireIdlePerHost && wr.total < wireIdleTotal {
		wr.idle[host] = append(wr.idle[host], c)
		wr.total++
		c = nil
	}
	wr.mu.Unlock()
	if c != nil {
		drop = append(drop, c)
	}
	for _, d := range drop {
		d.c.Close()
	}
}

// dropEmpty forgets host's list if it is empty: get leaves an emptied one
// for put to reuse, and a connection closed instead of put back must not
// leave it behind.
func (wr *wire) dropEmpty(host string) {
	wr.mu.Lock()
	if list, ok := wr.idle[host]; ok && len(list) == 0 {
		delete(wr.idle, host)
	}
	wr.mu.Unlock()
}

// closeIdle drops the idle connections to host (its driver is gone).
func (wr *wire) closeIdle(host string) {
	wr.mu.Lock()
	list := wr.idle[host]
	delete(wr.idle, host)
	wr.total -= len(list)
	wr.mu.Unlock()
	for _, c := range list {
		c.c.Close()
	}
}

// maxInterim bounds the interim (1xx) answers read past before a command's
// real answer: a driver that sends them without end gets an error, not the
// hub's time.
const maxInterim = 8

// wireMaxHead bounds an answer's head (status line and headers, interim
// answers' included) and its trailer section, as http.Transport's
// MaxResponseHeaderBytes does: a body is streamed, a head is held whole, and a
// driver that sends one without end must not fill the hub's memory. A
// driver's real head is well under a kilobyte.
const wireMaxHead = 1 << 20

// errHeadTooLarge is a head or trailer section past wireMaxHead.
var errHeadTooLarge = fmt.Errorf("the driver's answer head exceeds %d bytes", wireMaxHead)

// headLimit is the reader under a driver connection's bufio.Reader: while
// left is positive it counts what is read and fails once it runs out; a
// negative left reads without a bound (a body, which is streamed).
type headLimit struct {
	r    io.Reader
	left int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// cut is err, or errHeadTooLarge when the bound ran out: a parser that
// reaches the end of what it may read says so in its own words (a partial
// line is "malformed"), and the hub's should be the one told.
func (l *headLimit) cut(err error) error {
	if err != nil && l.left == 0 {
		return errHeadTooLarge
	}
	return err
}

// errNothingRead is a request whose connection broke before a byte of the answer
// arrived; errNotSent one whose connection broke while it was being written,
// so the driver has no whole request. On a reused connection a request not
// sent, or one safe to repeat (GET, HEAD), is sent again on a new one.
var (
	errNothingRead = errors.New("the driver closed the connection before answering")
	errNotSent     = errors.New("the connection to the driver broke while the request was sent")
)

// replayable is a request the driver may be sent twice: W3C WebDriver's GET
// commands read state; every other method may act (a click, a window closed).
func replayable(method string) bool { return method == http.MethodGet || method == http.MethodHead }

// do sends one request and copies the answer into w; the request's headers
// are hdr's, and raw's lines ("Name: value\r\n", already filtered). It
// returns an error only
// while nothing has been written to w; after that, a broken answer panics
// with http.ErrAbortHandler, so the client never takes it as whole.
func (wr *wire) do(ctx context.Context, w http.ResponseWriter, method, host, uri string, hdr http.Header, raw, body []byte) error {
	for attempt := 0; ; attempt++ {
		c, reused, err := wr.get(ctx, host)
		if err != nil {
			return err
		}
		err = wr.roundTrip(ctx, c, w, method, host, uri, hdr, raw, body)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil || !reused || attempt > 0 ||
			!(errors.Is(err, errNotSent) || (errors.Is(err, errNothingRead) && replayable(method))) {
			return err
		}
	}
}

func (wr *wire) roundTrip(ctx context.Context, c *wireConn, w http.ResponseWriter, method, host, uri string, hdr http.Header, raw, body []byte) (err error) {
	stop := context.AfterFunc(ctx, c.abort)
	keep := false
	defer func() {
		if !stop() || !keep {
			c.c.Close()
			wr.dropEmpty(host)
			return
		}
		wr.put(host, c)
	}()
	b := append(c.req[:0], method...)
	b = append(b, ' ')
	b = append(b, uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	for k, vs := range hdr {
		if hopHeaders[k] || k == "Authorization" || k == "Content-Length" || k == "Host" || k == "Expect" {
			continue // Expect: the hub holds the whole body, and its client had its 100 Continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, raw...)
	if body != nil || method == http.MethodPost || method == http.MethodPut {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	if len(body) <= wireInlineBody {
		b = append(b, body...)
		_, err = c.send(b)
	} else if _, err = c.c.Write(b); err == nil {
		_, err = c.send(body)
	}
	if cap(b) <= wireKeepReq {
		c.req = b[:0]
	} else {
		c.req = nil
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errNotSent, err)
	}

	br := c.br
	// The head is read within wireMaxHead, counted from what the buffer does
	// not hold yet; the body after it without a bound.
	c.lim.left = wireMaxHead
	tp := textproto.NewReader(br)
	var a answerHead
	for interim := 0; ; interim++ {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if len(line) == 0 && interim == 0 {
				return fmt.Errorf("%w: %v", errNothingRead, err)
			}
			return fmt.Errorf("reading the driver's status line: %w", c.lim.cut(err))
		}
		if err := a.statusLine(line); err != nil {
			return err
		}
		mh, err := tp.ReadMIMEHeader()
		if err != nil {
			return fmt.Errorf("reading the driver's headers: %w", c.lim.cut(err))
		}
		// An interim answer's framing is checked as a final one's: a client
		// that reads answers as Go's does refuses either alike.
		if err := a.framing(mh); err != nil {
			return err
		}
		if a.status >= 200 {
			break
		}
		// An interim answer (100 Continue, 103 Early Hints) comes before the
		// real one and is not the client's: its client had its own 100
		// Continue from the hub's server, if it asked. Relayed, it would end
		// the client's answer early and leave the real one in the pooled
		// connection for the next command to read.
		if a.status == http.StatusSwitchingProtocols {
			return fmt.Errorf("the driver switched protocols (101) on a command that asked for no upgrade")
		}
		if interim == maxInterim {
			return fmt.Errorf("the driver sent over %d interim (1xx) answers to one command", maxInterim)
		}
	}
	status, length, chunked, closeAfter := a.status, a.length, a.chunked, a.close
	out := w.Header()
	for k, vs := range a.header {
		if k == "Content-Length" {
			if !chunked {
				out[k] = vs[:1]
			}
			continue
		}
		if !hopHeaders[k] {
			out[k] = vs
		}
	}
	c.lim.left = -1
	var src io.Reader
	switch {
	case method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified:
		src, length, chunked = http.NoBody, 0, false // no body, and so no chunks or trailer to read
	case chunked:
		src, length = httputil.NewChunkedReader(br), -1
	case length >= 0:
		c.body = io.LimitedReader{R: br, N: length}
		src = &c.body
	default:
		src, closeAfter = br, true // the answer ends when the driver closes
	}
	w.WriteHeader(status)
	var dst io.Writer = w
	if _, ok := w.(io.ReaderFrom); ok {
		dst = writerOnly{w} // the copy uses the pooled buffer, not one of its own
	}
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(dst, src, *buf)
	copyBufs.Put(buf)
	if err == nil && chunked {
		c.lim.left = wireMaxHead
		_, err = tp.ReadMIMEHeader() // the trailer section, ended by an empty line
		err = c.lim.cut(err)
		c.lim.left = -1
	}
	if err != nil || (length >= 0 && n != length) {
		if cw, ok := w.(*captured); ok {
			if cw.err != nil {
				return cw.err
			}
			return fmt.Errorf("%w: %w", errAnswerBroken, cmp.Or(err, io.ErrUnexpectedEOF))
		}
		if ctx.Err() != nil {
			return nil // the client left; nothing more to tell it
		}
		panic(http.ErrAbortHandler) // the driver's answer broke off
	}
	keep = !closeAfter
	return nil
}

// DriverClient is the hub's HTTP/1.1 client to drivers, shareable with the
// launchers for their readiness polls (an http.RoundTripper for GET and HEAD
// without a body): a driver's connections are then one pool, and the poll that
// finds a driver ready leaves its connection to the new-session call, which
// leaves it to the session's commands. The zero value is not usable; call
// NewDriverClient.
type DriverClient struct{ w *wire }

// NewDriverClient returns a client with an empty connection pool.
func NewDriverClient() *DriverClient { return &DriverClient{w: newWire()} }

// NewDriverClientDial is NewDriverClient connecting through dial: the
// process launcher's sandboxes are reached through a netns.Dialer.
func NewDriverClientDial(dial DialFunc) *DriverClient { return &DriverClient{w: newWireDial(dial)} }

// ForgetHost closes the idle connections to host: a start that failed after
// its poll leaves none to whatever answered on the port (launcher.HostForgetter).
func (d *DriverClient) ForgetHost(host string) { d.w.closeIdle(host) }

// maxProbeAnswer bounds what a RoundTrip reads of an answer: a driver's
// /status is small.
const maxProbeAnswer = 1 << 20

// RoundTrip sends a GET or HEAD without a body. It follows no redirect and
// reads the answer whole (up to 1 MiB) before returning it.
func (d *DriverClient) RoundTrip(req *http.Request) (*http.Response, error) {
	if (req.Method != http.MethodGet && req.Method != http.MethodHead) || (req.Body != nil && req.Body != http.NoBody) {
		return nil, fmt.Errorf("the hub's driver client round-trips GET and HEAD without a body, not %s", req.Method)
	}
	c, err := d.w.call(req.Context(), req.Method, req.URL, req.Header, nil, maxProbeAnswer)
	if err != nil {
		return nil, err
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", c.status, http.StatusText(c.status)), StatusCode: c.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: c.header,
		Body: io.NopCloser(bytes.NewReader(c.body)), ContentLength: int64(len(c.body)), Request: req,
	}, nil
}

// captured is the ResponseWriter of a call the hub makes for itself (the
// new-session call, DELETE), and of a detached request's answer: it keeps the
// answer, up to limit bytes.
type captured struct {
	header http.Header
	status int
	body   []byte
	limit  int
	err    error
}

// errAnswerBroken is an answer to a call of the hub's own that broke off
// after its status line.
var errAnswerBroken = errors.New("the driver's answer broke off")

// errTooLarge is an answer over the caller's limit.
var errTooLarge = errors.New("the answer exceeds its limit")

func (c *captured) Header() http.Header { return c.header }
func (c *captured) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captured) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if len(c.body)+len(p) > c.limit {
		c.err = errTooLarge
		return 0, c.err
	}
	c.body = append(c.body, p...)
	return len(p), nil
}

// call sends one request of the hub's own to a driver at u (http only) and
// returns the answer, read whole up to limit bytes. Like a command it shares
// the idle connections: a session's new-session call leaves the connection
// its first command takes, and DELETE takes one its commands left.
func (wr *wire) call(ctx context.Context, method string, u *url.URL, hdr http.Header, body []byte, limit int) (*captured, error) {
	if u.Scheme != "http" {
		return nil, fmt.Errorf("the hub's driver client speaks http, not %q", u.Scheme)
	}
	uri := u.EscapedPath()
	if !strings.HasPrefix(uri, "/") {
		uri = "/" + uri // JoinPath on a URL without a path leaves it relative
	}
	if u.RawQuery != "" {
		uri += "?" + u.RawQuery
	}
	c := &captured{header: http.Header{}, limit: limit}
	if err := wr.do(ctx, c, method, u.Host, uri, hdr, nil, body); err != nil {
		return nil, err
	}
	return c, nil
}

// answerHead is a driver answer's status line and headers, read as Go's HTTP
// client reads them (net/http's ReadResponse, whose rules the hub's clients
// mostly share): an answer either reads the same in both or is refused by the
// hub, so that a hostile or broken driver cannot frame a body one way for the
// hub and another for the client behind it (FuzzWireAnswer checks it).
type answerHead struct {
	status  int
	http10  bool
	close   bool  // the connection ends after this answer
	length  int64 // -1: not given
	chunked bool
	header  textproto.MIMEHeader
}

// statusLine reads "HTTP/1.1 200 OK\r\n": HTTP/1.x, spaces, a three-digit code
// of 100 or more, then the line's end or a space and a reason.
func (a *answerHead) statusLine(line []byte) error {
	l := bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	if len(l) < 9 || !bytes.HasPrefix(l, []byte("HTTP/1.")) || l[7] < '0' || l[7] > '9' || l[8] != ' ' {
		return fmt.Errorf("the driver's answer is not HTTP/1.x: %q", line)
	}
	code := bytes.TrimLeft(l[9:], " ")
	if i := bytes.IndexByte(code, ' '); i >= 0 {
		code = code[:i]
	}
	if len(code) != 3 || code[0] < '1' || code[0] > '9' || code[1] < '0' || code[1] > '9' || code[2] < '0' || code[2] > '9' {
		return fmt.Errorf("the driver's status line is malformed: %q", line)
	}
	*a = answerHead{status: int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0'), http10: l[7] == '0', length: -1}
	a.close = a.http10
	return nil
}

// framing reads how the body is framed: one Content-Length (repeated only as
// itself) or chunked, which alone may be the Transfer-Encoding and which
// overrides a length beside it; Connection's close token. An HTTP/1.0 answer's
// Transfer-Encoding is ignored, as Go's client ignores it (the answer ends with
// its connection).
func (a *answerHead) framing(mh textproto.MIMEHeader) error {
	a.header = mh
	if vs := mh["Content-Length"]; len(vs) > 0 {
		// Any other answer frames its body two ways, and whichever the hub
		// took, the client could read the other.
		for _, v := range vs[1:] {
			if v != vs[0] {
				return fmt.Errorf("the driver's answer has conflicting Content-Length headers %q", vs)
			}
		}
		n, err := strconv.ParseUint(vs[0], 10, 63)
		if err != nil {
			return fmt.Errorf("the driver's answer has a malformed Content-Length %q", vs[0])
		}
		a.length = int64(n)
	}
	if vs, ok := mh["Transfer-Encoding"]; ok && !a.http10 {
		if len(vs) != 1 || !strings.EqualFold(vs[0], "chunked") {
			return fmt.Errorf("the driver's answer has a Transfer-Encoding other than chunked alone: %q", vs)
		}
		// The chunks frame the body, and the client gets it with a framing
		// of the hub's server's own: a length beside them is not the body's
		// (RFC 9112 §6.3).
		a.chunked, a.length = true, -1
	}
	for _, v := range mh["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), "close") {
				a.close = true
			}
		}
	}
	return nil
}
