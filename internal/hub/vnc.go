package hub

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/websocket"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// vncDialTimeout bounds the wait for a session's VNC server, which starts with
// the browser and may be a moment behind it.
const vncDialTimeout = 3 * time.Second

// vnc serves /vnc/{id}: a WebSocket of binary frames carrying the RFB stream of
// the session's screen (port 5900 of its container), as Selenoid serves it to
// selenoid-ui and noVNC. Only a session started with enableVNC has one. Watching
// does not keep a session alive: the socket closes when the session ends, and
// the idle timer runs as if nobody watched.
func (h *Hub) vnc(w http.ResponseWriter, r *http.Request) {
	s, ok := h.begin(w, r)
	if !ok {
		return
	}
	h.sessions.Done(s)
	target := s.Endpoints().VNC
	if !s.VNC || target == nil {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnsupportedOperation,
			fmt.Sprintf("session %s has no VNC: start it with \"enableVNC\": true in selenoid:options or websummoner:options, on a browser image that serves VNC on port 5900 (docs/live-view.md)", s.ID))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument,
			fmt.Sprintf("/vnc/%s is a WebSocket (RFB in binary frames): connect with a WebSocket client such as noVNC", s.ID))
		return
	}
	if !socketOpening(w, r) {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// Cancelling closes both sides (the handler below waits on ctx).
	done := h.openSide(w, r, s, "VNC", httpserver.ShedWatcher, cancel)
	if done == nil {
		return
	}
	defer done()
	conn, err := dialRetry(ctx, target.Host, vncDialTimeout)
	if err != nil {
		h.sideChannelDown(w, s, "VNC", target, err)
		return
	}
	defer conn.Close()
	logtag.Event(h.log, slog.LevelDebug, s.ID, "VNC", "connected", target.Host)
	websocket.Server{
		// Any origin: selenoid-ui and noVNC pages are served from elsewhere.
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler: func(ws *websocket.Conn) {
			ws.PayloadType = websocket.BinaryFrame
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(conn, ws); done <- struct{}{} }()
			go func() { _, _ = io.Copy(ws, conn); done <- struct{}{} }()
			select {
			case <-done:
			case <-s.Ended():
			case <-ctx.Done():
			}
			// A viewer that has stopped reading blocks the copy's write to
			// it, and Close waits for that write's lock: the write is cut
			// after the grace a reading viewer needs for the close frame.
			_ = ws.SetWriteDeadline(time.Now().Add(sideChannelCloseGrace))
			conn.Close()
			ws.Close()
			<-done
			<-done
		},
	}.ServeHTTP(w, r)
	logtag.Event(h.log, slog.LevelDebug, s.ID, "VNC", "closed")
}

// dialRetry connects to addr, trying again for up to limit while nothing
// listens yet.
func dialRetry(ctx context.Context, addr string, limit time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var d net.Dialer
	wait := 10 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}
