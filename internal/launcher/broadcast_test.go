package launcher

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// syncBuffer is a bytes.Buffer safe for a follower's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A follower that comes late gets the output from its start (the driver's
// start-up lines), then what follows; output past what is kept is replaced
// by a line that says how much was not kept, and a follower never gets more
// than the bounds plus what is written while it follows.
func TestBroadcastServesFromTheStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroadcast()
		b.Write([]byte("Starting ChromeDriver 156 on port 4444\n"))
		b.Write([]byte("ChromeDriver was started successfully.\n"))
		var late syncBuffer
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Follow(ctx, &late) }()
		synctest.Wait()
		b.Write([]byte("[1.000][INFO]: new session\n"))
		synctest.Wait()
		if got, want := late.String(), "Starting ChromeDriver 156 on port 4444\nChromeDriver was started successfully.\n[1.000][INFO]: new session\n"; got != want {
			t.Fatalf("a late follower got %q, want %q", got, want)
		}
		stop()
		<-done

		line := strings.Repeat("x", 1023) + "\n"
		for range 200 { // 200 KiB: past what is kept
			b.Write([]byte(line))
		}
		b.Write([]byte("the last line\n"))
		var later syncBuffer
		ctx, stop = context.WithCancel(context.Background())
		go func() { done <- b.Follow(ctx, &later) }()
		synctest.Wait()
		stop()
		<-done
		got := later.String()
		if !strings.HasPrefix(got, "Starting ChromeDriver") || !strings.HasSuffix(got, "the last line\n") ||
			!strings.Contains(got, "bytes of output not kept") || len(got) > headKept+tailKept+100 {
			t.Fatalf("after 200 KiB a follower got %d bytes: start %q, end %q", len(got), got[:min(len(got), 40)], got[max(0, len(got)-40):])
		}
		b.Close()
	})
}
