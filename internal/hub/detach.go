package hub

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

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
// The answer, when it comes, is written by hand with Connection: close. A
// server that cannot hand the connection over (HTTP/2, a test's recorder)
// waits as before.

// errDetached says the rest of a creation runs on its detached goroutine.
var errDetached = errors.New("detached to wait in the queue")

// detachedWriter is the ResponseWriter of a detached request: it keeps the one
// answer a creation writes (as a captured call does) and sends it as an
// HTTP/1.1 response.
type detachedWriter struct {
	captured
	conn net.Conn
	stop func() // ends the hang-up watch
	done atomic.Bool
}

// finish sends the answer (none to a client that left) and closes the
// connection.
func (d *detachedWriter) finish() {
	d.done.Store(true)
	d.stop()
	defer d.conn.Close()
	if d.status == 0 {
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", d.status, http.StatusText(d.status))
	d.header.Set("Content-Length", strconv.Itoa(len(d.body)))
	d.header.Set("Connection", "close")
	_ = d.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(d.body)
	_ = d.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, _ = d.conn.Write(b.Bytes())
}

// detach takes the request's connection over from the server, if it can.
func (h *Hub) detach(c *creation) bool {
	// The server's buffers are dropped with its goroutine: nothing follows a
	// new-session request on its connection until it is answered.
	conn, _, err := http.NewResponseController(c.w).Hijack()
	if err != nil {
		return false
	}
	_ = conn.SetDeadline(time.Time{})
	d := &detachedWriter{captured: captured{header: http.Header{}, limit: math.MaxInt}, conn: conn}
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
