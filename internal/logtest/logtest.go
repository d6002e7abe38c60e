// Package logtest lets tests wait for what a component logged instead of polling
// its state: a slog.Handler that passes every line to a channel.
package logtest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Lines receives every logged message; when it is full, lines are dropped rather
// than blocking the component under test.
type Lines chan string

// New returns a Lines with room for n messages and a logger writing to it.
func New(n int) (Lines, *slog.Logger) {
	l := make(Lines, n)
	return l, slog.New(l)
}

// Enabled accepts every level.
func (l Lines) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs ignores attributes: tests match on messages.
func (l Lines) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup ignores groups.
func (l Lines) WithGroup(string) slog.Handler { return l }

// Handle passes the message on.
func (l Lines) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default:
	}
	return nil
}

// Wait returns the first message from now on that contains tag, failing the test
// if none comes within d.
func (l Lines) Wait(t testing.TB, tag string, d time.Duration) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m := <-l:
			if strings.Contains(m, tag) {
				return m
			}
		case <-timeout:
			t.Fatalf("nothing logged with %s within %v", tag, d)
			return ""
		}
	}
}
