package hub

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/websocket"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// Session logs, as Selenoid serves them:
//
//	GET    /logs/          the kept log files (?json: a JSON array of names; else HTML)
//	GET    /logs/{file}    one file
//	DELETE /logs/{file}    remove it
//	GET    /logs/{id}      a live session's output while it runs: a WebSocket of
//	                       binary messages (selenoid-ui), or a streamed text/plain body; from its start

// logs serves /logs/ and /logs/{name}.
func (h *Hub) logs(w http.ResponseWriter, r *http.Request) {
	name, ok := fileName(w, r, logFiles)
	if !ok {
		return
	}
	if name != "" {
		// Another user's live session is answered as any name that is not
		// theirs (a kept file, for the operator only), so its existence is
		// not told.
		if s, ok := h.sessions.Get(name); ok && h.sees(r, s) {
			h.followLog(w, r, s.ID)
			return
		}
	}
	h.serveKept(w, r, h.opts.LogDir, name, logFiles)
}

// sessionLogs is Selenoid's alias /session/{id}/aerokube/logs of
// /logs/{id}: the session's live output. Its id is a session's, never a
// kept file's name.
func (h *Hub) sessionLogs(w http.ResponseWriter, r *http.Request) {
	h.followLog(w, r, pathID(r))
}

// followLog streams a live session's output. Watching does not keep a session
// alive: its idle timer runs as if nobody watched, and the stream ends with it.
func (h *Hub) followLog(w http.ResponseWriter, r *http.Request, id string) {
	s, ok := h.beginID(w, r, id)
	if !ok {
		return
	}
	h.sessions.Done(s) // a viewer is not a client: an open view must not hold the session and its slot
	src := s.Endpoints().Log
	if src == nil {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation, fmt.Sprintf("session %s has no live output to follow", id))
		return
	}
	socket := strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
	if socket && !socketOpening(w, r) {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// Ending the follow ends the stream, and the socket with it.
	done := h.openSide(w, r, s, "live log", httpserver.ShedWatcher, cancel)
	if done == nil {
		return
	}
	defer done()
	cancelAtEnd(ctx, cancel, s)
	if socket {
		websocket.Server{Handshake: func(*websocket.Config, *http.Request) error { return nil }, Handler: func(c *websocket.Conn) {
			// Binary frames, as Selenoid sends them; selenoid-ui reads either.
			c.PayloadType = websocket.BinaryFrame
			go func() { // a closed socket ends the follow
				_, _ = io.Copy(io.Discard, c)
				cancel()
			}()
			// An ended follow unblocks Follow's write to a viewer that has
			// stopped reading (Close would wait for that write's lock); one
			// that reads gets the rest and the close frame within the grace.
			defer whileServing(ctx, func() { _ = c.SetWriteDeadline(time.Now().Add(sideChannelCloseGrace)) })()
			_ = src.Follow(ctx, c)
			c.Close()
		}}.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// A stream is not followed by another request on its connection, which
	// keeps the write deadline below from outliving it. (HTTP/2's deadlines
	// are a stream's, and there the header would close every stream.)
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	// The answer's head goes at once: a viewer knows it is following before
	// the session writes anything.
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	// An ended follow unblocks a write to a viewer that has stopped reading;
	// one that reads gets the stream's end within the grace.
	defer whileServing(ctx, func() { _ = rc.SetWriteDeadline(time.Now().Add(sideChannelCloseGrace)) })()
	_ = src.Follow(ctx, flushWriter{w})
}

// whileServing runs f when ctx ends, if that is before the returned stop is
// called; stop waits for an f already running. A handler defers stop, so f
// never touches its ResponseWriter after it returned: HTTP/2 lets a
// stream's writer go then, and a deadline set on it from context.AfterFunc
// alone, when a client reset the stream, crashed the hub.
func whileServing(ctx context.Context, f func()) (stop func()) {
	var mu sync.Mutex
	returned := false
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !returned {
			f()
		}
	})
	return func() {
		stopAfter()
		mu.Lock()
		returned = true
		mu.Unlock()
	}
}

// sideChannelCloseGrace is how long a live log or VNC socket that has ended
// may take to reach its viewer before its connection is cut.
const sideChannelCloseGrace = 5 * time.Second

// flushWriter sends each write at once.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	_ = http.NewResponseController(f.w).Flush()
	return n, err
}
