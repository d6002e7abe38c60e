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
// An empty id is written as "-", as Selenoid does for lines that belong to no request.
func Event(l *slog.Logger, level slog.Level, id, event string, details ...any) {
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	l.Log(context.Background(), level, Format(id, event, details...))
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
		b.WriteString(" [")
		if s, ok := d.(string); ok {
			writeEscaped(&b, s)
		} else {
			writeEscaped(&b, fmt.Sprint(d))
		}
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
// standard logger (and so Selenoid), followed by any attributes as key=value.
type Handler struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Leveler
	attrs []slog.Attr
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
