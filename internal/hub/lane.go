package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/websummoner/websummoner/internal/httpserver"
	"github.com/websummoner/websummoner/internal/logtag"
)

// Lanes: a client connection that sends plain commands is served by the hub's
// own loop (httpserver.Lane) after its first command, instead of by Go's HTTP
// server: the loop reads the next request's head where it lies in the
// connection's buffer, and serves it when it is a plain command in the narrow
// form every WebDriver client sends — HTTP/1.1, GET, POST or DELETE, a
// /session/{id}/… path of plain characters, a Host, a Content-Length of at most
// wireMaxBody or none, no Transfer-Encoding, Expect, Upgrade or other
// connection options. Anything else, malformed input included, goes back to Go's
// HTTP server byte for byte (Lane.HandBack), which answers it as it always has;
// so does every request while basic authentication is on (the lane does not
// check credentials). What the loop saves is per command: Go's server's
// background-read goroutine, two reads that find nothing, and its request and
// response state (docs/benchmarks.md).

// laneHead is the part of a request's head the lane parsed.
type laneHead struct {
	method  string
	target  string // escaped path and query, as sent
	headers []byte // the header lines to forward, each ending in CRLF
	length  int    // Content-Length; 0 when none
	close   bool   // Connection: close
	size    int    // bytes of the head, blank line included
}

// laneMaxHead bounds a head the lane parses: the connection's reader holds 4
// KiB; a longer head goes to Go's HTTP server.
const laneMaxHead = 4096

// runLane serves r's connection as a lane, if it can be one, after the command
// r was answered whole.
func (h *Hub) runLane(w http.ResponseWriter, r *http.Request) {
	if h.wire == nil || h.opts.NoLanes || (h.opts.Auth != nil && h.opts.Auth.Enabled()) {
		return
	}
	l := httpserver.TakeLane(w, r)
	if l == nil {
		return
	}
	lw := &laneWriter{l: l, hdr: http.Header{}}
	// One context and one stand-in request for the lane's whole life, not
	// one a command: a client that hangs up cancels the context, and the
	// lane ends after that command, so a cancelled one is never used again.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lc := &laneCall{ctx: ctx, cancel: cancel, r: (&http.Request{URL: &url.URL{}}).WithContext(ctx)}
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			logtag.Event(h.log, slog.LevelError, "", "LANE_PANIC", fmt.Sprint(v), "the client's connection is closed")
		}
		l.Close()
	}()
	if l.Wait() != nil {
		return
	}
	var hd laneHead
	for {
		ok, err := h.laneParse(l, &hd)
		if err != nil {
			if l.Reader().Buffered() > 0 {
				l.HandBack() // a head cut short: Go's server answers it
			}
			return
		}
		if !ok {
			l.HandBack()
			return
		}
		_, _ = l.Reader().Discard(hd.size)
		var body []byte
		if hd.length > 0 {
			body = make([]byte, hd.length)
			if l.ReadBody(body) != nil {
				return
			}
		}
		lw.reset()
		if !h.laneCommand(l, lw, lc, &hd, body) || hd.close {
			// Closed after this answer, at once: not after the client's next
			// request, which would then be lost.
			if out := lw.finish(); out != nil {
				_, _ = l.Write(out)
			}
			return
		}
		if l.Finish(lw.finish()) != nil {
			return
		}
	}
}

// laneParse parses the next request's head in the reader without consuming
// it; ok is false for a request the lane does not serve.
func (h *Hub) laneParse(l *httpserver.Lane, hd *laneHead) (ok bool, err error) {
	br := l.Reader()
	var head []byte
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			head = buf[:i+4]
			break
		}
		if bareLF(buf) {
			return false, nil // lines ended by LF alone: Go's server reads those
		}
		if br.Buffered() >= laneMaxHead {
			return false, nil
		}
		if err := l.More(); err != nil {
			return false, err
		}
	}
	return parseLaneHead(head, hd), nil
}

// parseLaneHead parses a request head (blank line included) into hd; false
// for a request the lane does not serve. What it takes, Go's HTTP server
// reads the same way (FuzzLaneHead).
func parseLaneHead(head []byte, hd *laneHead) bool {
	*hd = laneHead{headers: hd.headers[:0], size: len(head)}
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if !parseRequestLine(line, hd) {
		return false
	}
	escPath, _, _ := strings.Cut(hd.target, "?")
	id, cmd, ok := commandPath(escPath)
	if !ok || !laneCommandOK(hd.method, cmd) || dotSegment(escPath) || id == "" {
		return false
	}
	host, lengths := 0, 0
	for len(rest) > 2 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := splitHeader(line)
		if !ok {
			return false
		}
		switch {
		case asciiEqualFold(name, "Host"):
			if !validHost(value) {
				return false // Go's server answers 400 to a malformed Host
			}
			host++
		case asciiEqualFold(name, "Content-Length"):
			if lengths++; lengths > 1 || len(value) == 0 || len(value) > 7 {
				return false
			}
			n := 0
			for _, c := range value {
				if c < '0' || c > '9' {
					return false
				}
				n = n*10 + int(c-'0')
			}
			if n > wireMaxBody {
				return false
			}
			hd.length = n
		case asciiEqualFold(name, "Connection"):
			for tok := range strings.SplitSeq(string(value), ",") {
				switch strings.ToLower(strings.TrimSpace(tok)) {
				case "close":
					hd.close = true
				case "keep-alive", "":
				default:
					return false // it names headers to drop, or upgrades
				}
			}
		case asciiEqualFold(name, "Transfer-Encoding"), asciiEqualFold(name, "Upgrade"), asciiEqualFold(name, "Expect"),
			asciiEqualFold(name, "Te"), asciiEqualFold(name, "Trailer"):
			return false
		case asciiEqualFold(name, "Keep-Alive"), asciiEqualFold(name, "Proxy-Connection"),
			asciiEqualFold(name, "Proxy-Authorization"), asciiEqualFold(name, "Proxy-Authenticate"),
			asciiEqualFold(name, "Authorization"):
			// hop by hop, or credentials for the hub: never forwarded
		default:
			hd.headers = append(hd.headers, line...)
			hd.headers = append(hd.headers, "\r\n"...)
		}
	}
	if host != 1 {
		return false
	}
	return true
}

// laneCommandOK is fastCommand for a lane's head: no uploads, BiDi or
// side channels.
func laneCommandOK(method, cmd string) bool {
	switch {
	case strings.HasPrefix(cmd, "se/"), strings.HasPrefix(cmd, "aerokube/"):
		return false
	case method == http.MethodPost && (cmd == "file" || strings.HasSuffix(cmd, "/file")):
		return false
	}
	return true
}

// parseRequestLine takes "METHOD target HTTP/1.1" in the lane's narrow form.
func parseRequestLine(line []byte, hd *laneHead) bool {
	m, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return false
	}
	switch string(m) {
	case http.MethodGet:
		hd.method = http.MethodGet
	case http.MethodPost:
		hd.method = http.MethodPost
	case http.MethodDelete:
		hd.method = http.MethodDelete
	default:
		return false
	}
	target, proto, ok := bytes.Cut(rest, []byte(" "))
	if !ok || string(proto) != "HTTP/1.1" || len(target) == 0 || target[0] != '/' {
		return false
	}
	for i := 0; i < len(target); i++ {
		c := target[i]
		switch {
		case c <= ' ' || c >= 0x7f, c == '#', c == '\\', c == '"', c == '<', c == '>', c == '^', c == '`',
			c == '{', c == '|', c == '}':
			return false
		case c == '%':
			if i+2 >= len(target) || !isHex(target[i+1]) || !isHex(target[i+2]) {
				return false
			}
		}
	}
	hd.target = string(target)
	return true
}

// bareLF reports whether b has a line feed without a carriage return before it.
func bareLF(b []byte) bool {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// validHost reports whether a Host value has only the bytes Go's HTTP server
// accepts in one (httpguts.ValidHostHeader): letters, digits and
// "!$%&'()*+,-.:;=[]_~".
func validHost(v []byte) bool {
	for _, c := range v {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!$%&'()*+,-.:;=[]_~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// splitHeader splits "Name: value" with a token name and a value of visible
// characters, spaces and tabs; obs-fold and anything else is not ok.
func splitHeader(line []byte) (name, value []byte, ok bool) {
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return nil, nil, false
	}
	name = line[:i]
	for _, c := range name {
		if !isTokenChar(c) {
			return nil, nil, false
		}
	}
	value = bytes.Trim(line[i+1:], " \t")
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, false
		}
	}
	return name, value, true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		d := s[i]
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// laneCall is what a lane's commands share: the context a hang-up cancels,
// and r, which stands for the command where the hub's shared code wants a
// request (the session lookup's and the error's messages; authentication is
// off on a lane), its method and path set afresh for each command.
type laneCall struct {
	ctx    context.Context
	cancel context.CancelFunc
	r      *http.Request
}

// laneCommand serves one parsed command into lw; false when the connection
// is to close after the answer (the client left, the answer broke off).
func (h *Hub) laneCommand(l *httpserver.Lane, lw *laneWriter, lc *laneCall, hd *laneHead, body []byte) bool {
	h.requests.Add(1)
	h.laneCommands.Add(1)
	escPath, rawQuery, _ := strings.Cut(hd.target, "?")
	escID, _, _ := commandPath(escPath)
	id := escID
	if strings.IndexByte(id, '%') >= 0 {
		if u, err := url.PathUnescape(id); err == nil {
			id = u
		}
	}
	ctx, r := lc.ctx, lc.r
	r.Method, r.URL.Path, r.URL.RawQuery = hd.method, escPath, rawQuery
	s, ok := h.beginID(lw, r, id)
	if !ok {
		return true
	}
	defer h.sessions.Done(s)
	h.opts.Load.Begin()
	defer h.opts.Load.End()
	base := s.URL()
	path := escPath
	if i := strings.Index(path, "/session/"); i >= 0 {
		path = path[i:]
	}
	uri := path
	if base.Path != "" && base.Path != "/" {
		uri = strings.TrimSuffix(base.EscapedPath(), "/") + path
	}
	if rawQuery != "" {
		uri += "?" + rawQuery
	}
	if hd.method == http.MethodPost && body == nil {
		body = []byte{}
	}
	l.Watch(lc.cancel)
	err := h.wire.do(ctx, lw, hd.method, base.Host, uri, nil, hd.headers, body)
	l.Unwatch() // not on a panic: Close stops the watch then
	if err != nil {
		if ctx.Err() != nil {
			return false // the client hung up
		}
		if lw.status != 0 {
			return false
		}
		h.commandError(lw, r, s, err)
	}
	// An answer short of its declared length (or over it) is cut off here:
	// the lane sends what it has and closes, as Go's server aborts one.
	return lw.whole() && ctx.Err() == nil
}

// laneWriter is a lane's http.ResponseWriter: the answer is built in buf and
// written when it is done (or in 32 KiB pieces once it is longer), head
// first. An answer of undeclared length is sent with the length it came to,
// or chunked once it passes laneBuffer.
type laneWriter struct {
	l       *httpserver.Lane
	hdr     http.Header
	status  int
	length  int64 // declared; -1 when not
	written int64 // of a declared length
	chunked bool
	noBody  bool
	buf     []byte
	err     error // a write to the client failed
}

const laneBuffer = 32 << 10

func (w *laneWriter) reset() {
	clear(w.hdr)
	w.status, w.length, w.written, w.chunked, w.noBody, w.err = 0, -1, 0, false, false, nil
	if cap(w.buf) > 4*laneBuffer {
		w.buf = nil
	}
	w.buf = w.buf[:0]
}

func (w *laneWriter) Header() http.Header { return w.hdr }

func (w *laneWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if code < 200 {
		code = http.StatusBadGateway // informational answers are not relayed
	}
	w.status = code
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified
	if v := w.hdr["Content-Length"]; len(v) == 1 && !w.noBody {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
			w.length = n
		}
	}
	if w.length >= 0 || w.noBody {
		w.head()
	}
}

// head appends the status line and the headers to buf.
func (w *laneWriter) head() {
	b := append(w.buf, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.status)...)
	b = append(b, "\r\n"...)
	for k, vs := range w.hdr {
		if hopHeaders[k] || k == "Content-Length" && w.length < 0 {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if w.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	w.buf = append(b, "\r\n"...)
}

func (w *laneWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		return len(p), nil
	}
	n := len(p)
	switch {
	case w.length >= 0:
		if w.written+int64(len(p)) > w.length {
			// Never more than the head declared: the client would read the rest
			// as the next answer.
			p = p[:w.length-w.written]
			w.err = errLaneOverlong
		}
		w.written += int64(len(p))
		w.buf = append(w.buf, p...)
	case w.chunked:
		w.buf = strconv.AppendInt(w.buf, int64(len(p)), 16)
		w.buf = append(w.buf, "\r\n"...)
		w.buf = append(w.buf, p...)
		w.buf = append(w.buf, "\r\n"...)
	default:
		w.buf = append(w.buf, p...) // the body so far; the head comes in finish
		if len(w.buf) > laneBuffer {
			body := w.buf
			w.buf = nil
			w.chunked = true
			w.head()
			w.buf = strconv.AppendInt(w.buf, int64(len(body)), 16)
			w.buf = append(w.buf, "\r\n"...)
			w.buf = append(w.buf, body...)
			w.buf = append(w.buf, "\r\n"...)
		}
	}
	if len(w.buf) > laneBuffer && (w.length >= 0 || w.chunked) {
		if _, err := w.l.Write(w.buf); err != nil {
			w.err = err
			return 0, err
		}
		w.buf = w.buf[:0]
	}
	if w.err != nil {
		return len(p), w.err
	}
	return n, nil
}

// errLaneOverlong is an answer longer than its declared Content-Length.
var errLaneOverlong = errors.New("the answer is longer than its Content-Length")

// whole reports whether the answer so far is one the client may take as
// complete: nothing failed, and a declared length was met.
func (w *laneWriter) whole() bool {
	return w.err == nil && (w.length < 0 || w.written == w.length)
}

// finish is the rest of the answer to send; nil when nothing was answered.
func (w *laneWriter) finish() []byte {
	if w.status == 0 {
		return nil
	}
	switch {
	case w.chunked:
		w.buf = append(w.buf, "0\r\n\r\n"...)
	case w.length < 0 && !w.noBody:
		body := w.buf
		w.length = int64(len(body))
		w.hdr["Content-Length"] = []string{strconv.Itoa(len(body))}
		w.buf = nil
		w.head()
		w.buf = append(w.buf, body...)
	}
	return w.buf
}
