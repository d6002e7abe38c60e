package logtag

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// NewJSONHandler returns a Handler writing to w, at or above level, each record
// as one JSON object per line (-log-format json), for log shippers. An event
// logged with Event has stable keys:
//
//	time, level, event, message (the text line's "[id] [EVENT] [...]"),
//	request_id (a numeric id) or session_id, details (every detail as text),
//	and one key per Field: session_id, browser, duration_ms, reason.
func NewJSONHandler(w io.Writer, level slog.Leveler) *Handler {
	h := NewHandler(w, level)
	h.json = true
	return h
}

func (h *Handler) handleJSON(r slog.Record) error {
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	obj := map[string]any{"time": t.UTC().Format(time.RFC3339Nano), "level": r.Level.String(), "message": r.Message}
	add := func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(*entry); ok && a.Key == entryKey {
			e.fill(obj)
			return true
		}
		obj[a.Key] = a.Value.Any()
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	line, err := json.Marshal(obj)
	if err != nil {
		line, _ = json.Marshal(map[string]any{"time": obj["time"], "level": obj["level"], "message": r.Message})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err = h.w.Write(append(line, '\n'))
	return err
}

// fill adds an event's keys: its id as request_id (the hub's numeric request
// ids) or session_id, the event, each Field under its key, and every detail's
// text.
func (e *entry) fill(obj map[string]any) {
	obj["event"] = e.event
	if e.id != "" && e.id != "-" {
		if isNumber(e.id) {
			obj["request_id"] = e.id
		} else {
			obj["session_id"] = e.id
		}
	}
	details := make([]string, 0, len(e.details))
	for _, d := range e.details {
		if f, ok := d.(Field); ok {
			obj[f.Key] = f.Value
			if f.Text != "" {
				details = append(details, f.Text)
			}
			continue
		}
		details = append(details, fmt.Sprint(d))
	}
	if len(details) > 0 {
		obj["details"] = details
	}
}

func isNumber(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
