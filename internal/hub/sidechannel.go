package hub

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// Defaults for zero side-channel Options fields: a test opens a handful of
// sockets to its session (a CDP client, a BiDi one, a viewer or two); a
// client runs many sessions at once.
const (
	DefaultMaxSideChannelsPerSession = 16
	DefaultMaxSideChannelsPerClient  = 64
)

// sideChannels counts the open side channels (live logs, VNC, DevTools and
// BiDi sockets) per session and per client, against the caps: without them
// one client's sockets took every descriptor of the hub.
type sideChannels struct {
	mu        sync.Mutex
	bySession map[string]int
	byClient  map[string]int
}

// sideClient is who the caps count r against: its user under -htpasswd, its
// IP address otherwise (every port of one host is one client).
func (h *Hub) sideClient(r *http.Request) string {
	if h.opts.Auth != nil && h.opts.Auth.Enabled() {
		return "user " + userOf(r)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return host
}

// openSide takes a place for one side channel of s opened by r, and registers
// it with the HTTP server as sheddable (rank) with close, which must end it.
// When a cap is reached it answers 429 naming the cap and returns nil; else
// the caller calls the returned function when the channel ends.
func (h *Hub) openSide(w http.ResponseWriter, r *http.Request, s *session.Session, what string, rank httpserver.ShedRank, close func()) (done func()) {
	client := h.sideClient(r)
	c := &h.side
	c.mu.Lock()
	if c.bySession == nil {
		c.bySession, c.byClient = map[string]int{}, map[string]int{}
	}
	perSession, perClient := c.bySession[s.ID], c.byClient[client]
	full := perSession >= h.opts.MaxSideChannelsPerSession || perClient >= h.opts.MaxSideChannelsPerClient
	if !full {
		c.bySession[s.ID]++
		c.byClient[client]++
	}
	c.mu.Unlock()
	switch {
	case perSession >= h.opts.MaxSideChannelsPerSession:
		logtag.Event(h.log, slog.LevelWarn, s.ID, "SIDE_CHANNEL_REFUSED", what, fmt.Sprintf("%d open to the session", perSession))
		webdriver.WriteError(w, http.StatusTooManyRequests, webdriver.ErrUnknownError,
			fmt.Sprintf("session %s already has %d side channels open (live logs, VNC, DevTools, BiDi), the most -max-side-channels-per-session allows: close one first, or raise the flag", s.ID, perSession))
		return nil
	case full:
		logtag.Event(h.log, slog.LevelWarn, s.ID, "SIDE_CHANNEL_REFUSED", what, fmt.Sprintf("%d open by %s", perClient, client))
		webdriver.WriteError(w, http.StatusTooManyRequests, webdriver.ErrUnknownError,
			fmt.Sprintf("%s already has %d side channels open (live logs, VNC, DevTools, BiDi) across its sessions, the most -max-side-channels-per-client allows: close some first, or raise the flag", client, perClient))
		return nil
	}
	unshed := httpserver.Sheddable(r.Context(), rank, close)
	var once sync.Once
	return func() {
		once.Do(func() {
			unshed()
			c.mu.Lock()
			if c.bySession[s.ID]--; c.bySession[s.ID] <= 0 {
				delete(c.bySession, s.ID)
			}
			if c.byClient[client]--; c.byClient[client] <= 0 {
				delete(c.byClient, client)
			}
			c.mu.Unlock()
		})
	}
}

// touchWriter is a ResponseWriter whose hijacked connection restarts its
// session's idle timer at each read from the client: a DevTools or BiDi
// client that talks through its socket is busy, while a silent socket does
// not keep the session for ever.
type touchWriter struct {
	http.ResponseWriter
	touch func()
	// client, if set, is told the client's connection once it is hijacked.
	client *clientConn
}

// Unwrap lets http.ResponseController reach the server's writer.
func (t touchWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// Hijack hands over the connection with its reads counted as activity.
func (t touchWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(t.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if t.client != nil {
		t.client.set(c)
	}
	return touchConn{Conn: c, touch: t.touch}, brw, nil
}

// clientConn is a side channel's hijacked client connection, to be closed
// when the channel must end (its session ended, or it is shed). Closing the
// driver's side is not enough: a tunnel copying to a client that has stopped
// reading is blocked in that write, and only closing the client's
// connection frees it, its goroutines and its descriptor.
type clientConn struct {
	mu     sync.Mutex
	c      net.Conn
	closed bool
}

func (cc *clientConn) set(c net.Conn) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed {
		_ = c.Close()
		return
	}
	cc.c = c
}

func (cc *clientConn) close() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.closed = true
	if cc.c != nil {
		_ = cc.c.Close()
	}
}

// touchConn calls touch after each read that brought bytes.
type touchConn struct {
	net.Conn
	touch func()
}

func (c touchConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

// toucher restarts s's idle timer, at most once a second: a busy CDP socket
// reads many times a second, and the timer counts in seconds.
func (h *Hub) toucher(s *session.Session) func() {
	var mu sync.Mutex
	var last time.Time
	return func() {
		mu.Lock()
		now := time.Now()
		due := now.Sub(last) >= time.Second
		if due {
			last = now
		}
		mu.Unlock()
		if due {
			h.sessions.Touch(s)
		}
	}
}

// socketOpening reports whether r, which asks for a WebSocket, opens one as
// RFC 6455 has it (and golang.org/x/net/websocket takes it), and otherwise
// answers why in a W3C error: before the side channel is counted or its peer
// dialled, and instead of websocket's own plain-text line.
func socketOpening(w http.ResponseWriter, r *http.Request) bool {
	why := ""
	switch {
	case r.Method != http.MethodGet:
		why = "a WebSocket opens with GET, not " + r.Method
	case !httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade"):
		why = `a WebSocket's opening request says "Connection: Upgrade"`
	case r.Header.Get("Sec-WebSocket-Key") == "":
		why = "a WebSocket's opening request has a Sec-WebSocket-Key"
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		w.Header().Set("Sec-WebSocket-Version", "13")
		why = fmt.Sprintf("Sec-WebSocket-Version %q: this hub speaks WebSocket version 13", r.Header.Get("Sec-WebSocket-Version"))
	default:
		return true
	}
	webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument, why)
	return false
}
