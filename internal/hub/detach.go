package hub

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// A new-session request that has to wait is detached from Go's HTTP server:
// the hub takes its connection over (Hijack), so the handler's goroutine, with
// its grown stack, the server's read and write buffers and the request itself
// go. What waits is the connection, registered with the hub's hang-up watcher
// (one goroutine for every waiter: a client that leaves is noticed at once),
// the creation's chosen capabilities, and a timer and a callback in the queue.
// The answer, when it comes, is written by hand, and the connection is given
// back to the hub's server to wait for the client's next request, as after
// any answer (httpserver.Rehold): the session's first command then needs no
// new connection. Where the server cannot take it back (TLS, another server),
// or the client asked for it (Connection: close, HTTP/1.0), the answer says
// Connection: close and the connection is closed. A server that cannot hand
// the connection over at all (HTTP/2, a test's recorder) waits as before.

// errDetached says the rest of a creation runs on its detached goroutine.
var errDetached = errors.New("detached to wait in the queue")

// captured keeps the one answer a creation writes.
type captured struct {
	header http.Header
	status int
	body   []byte
}

func (c *captured) Header() http.Header { return c.header }
func (c *captured) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captured) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	c.body = append(c.body, p...)
	return len(p), nil
}

// detachedWriter is the ResponseWriter of a detached request: it keeps the one
// answer a creation writes and sends it as an HTTP/1.1 response.
type detachedWriter struct {
	captured
	conn net.Conn
	stop func() // ends the hang-up watch
	// rehold gives the connection back to the server after the answer; nil:
	// the answer closes it.
	rehold func(net.Conn)
	done   atomic.Bool
}

// finish sends the answer (none to a client that left), then gives the
// connection back to the server or closes it.
func (d *detachedWriter) finish() {
	d.done.Store(true)
	d.stop()
	if d.status == 0 {
		_ = d.conn.Close()
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", d.status, http.StatusText(d.status))
	d.header.Set("Content-Length", strconv.Itoa(len(d.body)))
	if d.rehold == nil {
		d.header.Set("Connection", "close")
	}
	_ = d.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(d.body)
	_ = d.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, err := d.conn.Write(b.Bytes())
	if err != nil || d.rehold == nil || d.conn.SetWriteDeadline(time.Time{}) != nil {
		_ = d.conn.Close()
		return
	}
	d.rehold(d.conn)
}

// detach takes the request's connection over from the server, if it can.
func (h *Hub) detach(c *creation) bool {
	// The server's buffers are dropped with its goroutine: nothing follows a
	// new-session request on its connection until it is answered.
	conn, brw, err := http.NewResponseController(c.w).Hijack()
	if err != nil {
		return false
	}
	_ = conn.SetDeadline(time.Time{})
	d := &detachedWriter{captured: captured{header: http.Header{}}, conn: conn}
	// Kept after the answer only if the client keeps it and has sent nothing
	// more yet (bytes the server read ahead would be lost with its buffer).
	if c.r.ProtoAtLeast(1, 1) && !c.r.Close && brw.Reader.Buffered() == 0 {
		d.rehold = httpserver.Rehold(c.r.Context())
	}
	c.w, c.r = d, nil
	c.unhook()     // the handler's end no longer ends the creation
	c.unhook = nil // nor does its link hold the server's contexts
	d.stop = h.hangups.Watch(conn, func() {
		if !d.done.Load() {
			c.cancel() // the client left: its place in the queue goes
		}
	})
	return true
}

// resume runs the rest of a detached request's creation once the queue has
// settled it, and answers it.
func (h *Hub) resume(c *creation, slot *queue.Slot, out queue.Outcome) {
	d := c.w.(*detachedWriter)
	defer func() {
		if p := recover(); p != nil { // as the server would: log, give back, answer 500
			h.abandon(c)
			logtag.Event(h.log, slog.LevelError, c.id, "PANIC", fmt.Sprint(p))
			d.status, d.body = 0, nil
			webdriver.WriteError(d, http.StatusInternalServerError, webdriver.ErrUnknownError, "internal error creating the session")
		}
		d.finish()
		c.cancel()
	}()
	rest := creationPhases(h)[4:] // start, register
	if !out.Admitted {
		h.writeCreateError(d, c.id, &createError{phase: phaseAdmit, err: &refusal{out}})
		return
	}
	c.slot = slot
	if c.ctx.Err() != nil {
		h.abandon(c)
		h.writeCreateError(d, c.id, &createError{phase: phaseAdmit, err: errClientGone})
		return
	}
	h.runPhases(c, rest)
}
