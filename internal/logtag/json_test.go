package logtag

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The same events, as text and as JSON: the text line is unchanged by fields,
// and the JSON object has the stable keys whatever event it is.
func TestJSONEvents(t *testing.T) {
	var text, js bytes.Buffer
	for _, l := range []*slog.Logger{slog.New(NewHandler(&text, slog.LevelDebug)), slog.New(NewJSONHandler(&js, slog.LevelDebug))} {
		Event(l, slog.LevelInfo, "17", "SESSION_CREATED", SessionID("abc123"), Browser("chrome 128.0"), "3f2a", Duration("1.217s", 1217*time.Millisecond))
		Event(l, slog.LevelInfo, "abc123", "SESSION_TIMED_OUT", Browser("chrome 128.0"), "3f2a", Duration("after 5m0s", 5*time.Minute), Reason("idle timeout", false))
		Event(l, slog.LevelInfo, "18", "QUEUE_TIMEOUT", "keeping up", Duration("waited 30s", 30*time.Second), Reason("timeout", false))
		Event(l, slog.LevelWarn, "", "DOCKER_DOWN", "dial unix: no such file\n[1] [FORGED]")
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	for i, want := range []string{
		"[17] [SESSION_CREATED] [abc123] [chrome 128.0] [3f2a] [1.217s]",
		"[abc123] [SESSION_TIMED_OUT] [chrome 128.0] [3f2a] [after 5m0s]",
		"[18] [QUEUE_TIMEOUT] [keeping up] [waited 30s]",
		`WARN [-] [DOCKER_DOWN] [dial unix: no such file\n[1] [FORGED]]`,
	} {
		if len(lines) != 4 || !strings.HasSuffix(lines[i], want) {
			t.Fatalf("text line %d = %q, want …%q", i, lines, want)
		}
	}
	var objs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(js.String()), "\n") {
		var o map[string]any
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("not one JSON object per line: %q", l)
		}
		objs = append(objs, o)
	}
	check := func(i int, key string, want any) {
		t.Helper()
		if got := objs[i][key]; got != want {
			t.Errorf("event %d %s = %v (%T), want %v", i, key, got, got, want)
		}
	}
	check(0, "event", "SESSION_CREATED")
	check(0, "request_id", "17")
	check(0, "session_id", "abc123")
	check(0, "browser", "chrome 128.0")
	check(0, "duration_ms", 1217.0)
	check(0, "message", "[17] [SESSION_CREATED] [abc123] [chrome 128.0] [3f2a] [1.217s]")
	check(1, "session_id", "abc123")
	check(1, "reason", "idle timeout")
	check(1, "duration_ms", 300000.0)
	check(2, "reason", "timeout")
	check(2, "request_id", "18")
	check(3, "level", "WARN")
	check(3, "event", "DOCKER_DOWN")
	if _, ok := objs[3]["request_id"]; ok {
		t.Error("a line of no request has a request_id")
	}
	if _, err := time.Parse(time.RFC3339Nano, objs[0]["time"].(string)); err != nil {
		t.Errorf("time %v: %v", objs[0]["time"], err)
	}
}
