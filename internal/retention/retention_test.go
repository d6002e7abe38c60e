package retention

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/websummoner/websummoner/internal/logtest"
)

// put writes name in dir with size bytes, last written at mod.
func put(t *testing.T, dir, name string, size int, mod time.Time) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mod, mod); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// Files older than the age bound go; then the oldest go until the rest fit the
// size bound; each removal is logged with its reason and counted.
func TestSweepRemovesOldestFirstWithinBothBounds(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	put(t, dir, "ancient.log", 100, now.Add(-30*24*time.Hour))
	put(t, dir, "old.log", 100, now.Add(-3*time.Hour))
	put(t, dir, "older.log", 100, now.Add(-4*time.Hour))
	put(t, dir, "recent.log", 100, now.Add(-2*time.Hour))
	put(t, dir, "new.log", 100, now.Add(-time.Hour))
	ev, log := logtest.New(100)
	reg := prometheus.NewRegistry()
	r, err := New(Options{Kind: "log", Dir: dir, MaxAge: 7 * 24 * time.Hour, MaxSize: 250}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Sweep(); n != 3 {
		t.Fatalf("removed %d files, want 3", n)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"new.log", "recent.log"}) {
		t.Fatalf("left %v, want the two newest", got)
	}
	want := []string{"[ancient.log] [older than -log-retention-age 168h0m0s]", "[older.log] [the log files take 400 bytes", "[old.log] [the log files take 300 bytes"}
	for _, w := range want {
		if line := ev.Wait(t, "RETENTION_REMOVED", time.Second); !strings.Contains(line, w) {
			t.Errorf("logged %q, want %q", line, w)
		}
	}
	if v := testutil.ToFloat64(r.removed); v != 3 {
		t.Errorf("websummoner_retention_removed_total{kind=log} = %v, want 3", v)
	}
	// A second directory's retention shares the metric, with its own label.
	v, err := New(Options{Kind: "video", Dir: t.TempDir(), MaxSize: 1}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(v.removed) != 0 || testutil.CollectAndCount(reg, "websummoner_retention_removed_total") != 2 {
		t.Error("the video retention does not have a series of its own")
	}
}

// What may still be written is never removed: a file written within the
// settle time, one the caller names live, one this process holds open (a
// quiet running session's log, a video being copied), and a hidden one the
// hub did not make. A copy's temporary that nothing holds, left by a hub
// killed mid-copy, goes: it counted towards the size for ever, and every
// later video went in its place.
func TestSweepNeverRemovesFilesInUse(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-48 * time.Hour)
	put(t, dir, "fresh.log", 10, time.Now())
	put(t, dir, ".video.mp4.1234.part", 10, old)
	put(t, dir, ".left.mp4.5678.part", 10, old)
	put(t, dir, ".keep", 10, old)
	put(t, dir, "live.log", 10, old)
	put(t, dir, "open.log", 10, old)
	put(t, dir, "done.log", 10, old)
	for _, n := range []string{"open.log", ".video.mp4.1234.part"} {
		f, err := os.OpenFile(filepath.Join(dir, n), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
	}
	r, err := New(Options{Kind: "log", Dir: dir, MaxAge: time.Hour, MaxSize: 1, Live: func(n string) bool { return n == "live.log" }}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Sweep()
	if got := names(t, dir); !slices.Equal(got, []string{".keep", ".video.mp4.1234.part", "fresh.log", "live.log", "open.log"}) {
		t.Fatalf("left %v: only done.log and .left.mp4.5678.part may go", got)
	}
}

// No bound set keeps everything; a negative one is refused naming the flag.
func TestZeroKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, "a.log", 10, time.Now().Add(-1000*time.Hour))
	r, err := New(Options{Kind: "log", Dir: dir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sweep() != 0 || len(names(t, dir)) != 1 {
		t.Fatal("a retention with no bound removed a file")
	}
	if _, err := New(Options{Kind: "video", Dir: dir, MaxAge: -time.Second}, nil, nil); err == nil || !strings.Contains(err.Error(), "-video-retention-age") {
		t.Fatalf("a negative age: %v", err)
	}
	if _, err := New(Options{Kind: "log", Dir: dir, MaxSize: -1}, nil, nil); err == nil || !strings.Contains(err.Error(), "-log-retention-size") {
		t.Fatalf("a negative size: %v", err)
	}
}

// Run sweeps at start and then every interval: a file removed as soon as it
// passes the age bound, within an interval, and not before; Run returns when
// its context ends.
func TestRunSweepsAtStartAndPeriodically(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now() // the bubble's clock
		put(t, dir, "expired.log", 10, start.Add(-2*time.Hour))
		put(t, dir, "later.log", 10, start.Add(-30*time.Minute))
		r, err := New(Options{Kind: "log", Dir: dir, MaxAge: time.Hour}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		synctest.Wait()
		if got := names(t, dir); !slices.Equal(got, []string{"later.log"}) {
			t.Fatalf("after the first sweep: %v", got)
		}
		time.Sleep(29*time.Minute + 30*time.Second) // later.log is 59m30s old
		synctest.Wait()
		if len(names(t, dir)) != 1 {
			t.Fatal("later.log removed before it was an hour old")
		}
		time.Sleep(2 * time.Minute) // past the hour, and a sweep since
		synctest.Wait()
		if got := names(t, dir); len(got) != 0 {
			t.Fatalf("left %v an interval after it passed the age bound", got)
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Run did not return when its context ended")
		}
	})
}
