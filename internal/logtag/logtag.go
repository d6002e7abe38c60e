// Package logtag writes log lines in Selenoid's "[id] [EVENT] [details]" shape,
// so operators' existing greps and dashboards keep working.
package logtag

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Event logs one line "[id] [EVENT] [detail] [detail] ..." at the given level.
// An empty id is written as "-", as Selenoid does for lines that belong to no
// request. The pieces travel with the record too, so the JSON handler can give
// them stable keys.
func Event(l *slog.Logger, level slog.Level, id, event string, details ...any) {
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	l.LogAttrs(context.Background(), level, Format(id, event, details...),
		slog.Any(entryKey, &entry{id: id, event: event, details: details}))
}

// entryKey is the attribute that carries an event's pieces; the text handler
// does not print it.
const entryKey = "logtag"

type entry struct {
	id, event string
	details   []any
}

// Field is a detail with a name. The text form shows Text in brackets, like any
// detail (nothing when Text is empty); the JSON form also gives Value its own
// key, the same for every event, so log shippers need no pattern per line.
type Field struct {
	Key   string
	Value any
	Text  string
}

// String is the field's text form.
func (f Field) String() string { return f.Text }

// SessionID names the WebDriver session an event is about.
func SessionID(id string) Field { return Field{Key: "session_id", Value: id, Text: id} }

// Browser names the browser ("chrome 128.0").
func Browser(b string) Field { return Field{Key: "browser", Value: b, Text: b} }

// Duration is a time an event took or waited, shown as text (e.g. "after 3s")
// and given in JSON as duration_ms.
func Duration(text string, d time.Duration) Field {
	return Field{Key: "duration_ms", Value: d.Milliseconds(), Text: text}
}

// Reason says why something ended or was refused. With show false it appears
// in JSON only: the text line's event name already says it.
func Reason(why string, show bool) Field {
	f := Field{Key: "reason", Value: why}
	if show {
		f.Text = why
	}
	return f
}

// Format renders the bracketed shape without logging it; tests and error messages share it.
func Format(id, event string, details ...any) string {
	if id == "" {
		id = "-"
	}
	var b strings.Builder
	b.Grow(32 + 16*len(details))
	b.WriteByte('[')
	writeEscaped(&b, id)
	b.WriteString("] [")
	b.WriteString(event)
	b.WriteByte(']')
	for _, d := range details {
		text, ok := d.(string)
		if f, isField := d.(Field); isField {
			if f.Text == "" {
				continue
			}
			text, ok = f.Text, true
		}
		if !ok {
			text = fmt.Sprint(d)
		}
		b.WriteString(" [")
		writeEscaped(&b, text)
		b.WriteByte(']')
	}
	return b.String()
}

// writeEscaped writes s with control characters (newlines above all) escaped as
// Go escapes them, so a client-supplied value can never start a log line of its
// own and forge an event.
func writeEscaped(b *strings.Builder, s string) {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		b.WriteString(s)
		return
	}
	q := strconv.Quote(s)
	b.WriteString(q[1 : len(q)-1])
}

// Handler is a slog.Handler that prints "2006/01/02 15:04:05 message" lines like Go's
// standard logger (and so Selenoid), followed by any attributes as key=value;
// or, made by NewJSONHandler, one JSON object per line (json.go).
type Handler struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Leveler
	attrs []slog.Attr
	json  bool
}

// NewHandler returns a Handler writing to w lines at or above level.
func NewHandler(w io.Writer, level slog.Leveler) *Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &Handler{mu: &sync.Mutex{}, w: w, level: level}
}

// Enabled reports whether records at level are written.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.level.Level()
}

// Handle writes one record as one line.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	if h.json {
		return h.handleJSON(r)
	}
	var b strings.Builder
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.Format("2006/01/02 15:04:05 "))
	if r.Level >= slog.LevelWarn {
		b.WriteString(r.Level.String())
		b.WriteByte(' ')
	}
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		if a.Key == entryKey {
			return true
		}
		b.WriteByte(' ')
		b.WriteString(a.Key)
		b.WriteByte('=')
		b.WriteString(a.Value.String())
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// WithAttrs returns a Handler that adds attrs to every line.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &h2
}

// WithGroup is accepted for slog compatibility; groups are flattened.
func (h *Handler) WithGroup(string) slog.Handler { return h }
