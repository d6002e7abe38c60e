package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The retention flags reach the retention options with their directories, and
// a bad value stops start-up naming the flag.
func TestRetentionFlags(t *testing.T) {
	dir := t.TempDir()
	c, err := parseFlags([]string{"-conf", "../../config/browsers.docker.json", "-log-output-dir", dir, "-log-retention-age", "168h", "-log-retention-size", "10g",
		"-video-retention-age", "24h", "-video-retention-size", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.logKeep.Dir != dir || c.logKeep.Kind != "log" || c.logKeep.MaxAge != 168*time.Hour || c.logKeep.MaxSize != 10<<30 {
		t.Errorf("log retention %+v", c.logKeep)
	}
	if c.videoKeep.Kind != "video" || c.videoKeep.MaxAge != 24*time.Hour || c.videoKeep.MaxSize != 0 {
		t.Errorf("video retention %+v", c.videoKeep)
	}
	for args, want := range map[string]string{
		"-log-retention-age=-1s":     "-log-retention-age must be 0",
		"-video-retention-age=-1h":   "-video-retention-age must be 0",
		"-log-retention-size=lots":   "-log-retention-size",
		"-video-retention-size=-10g": "-video-retention-size",
	} {
		var stderr strings.Builder
		full := []string{"-conf", "../../config/browsers.docker.json", "-listen", "127.0.0.1:0", "-log-output-dir", dir, args}
		if code := run(full, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", args, code, stderr.String(), want)
		}
	}
	// Built, the log retention bounds -log-output-dir.
	old := filepath.Join(dir, "old.log")
	os.WriteFile(old, []byte("x"), 0o644)
	os.Chtimes(old, time.Now().Add(-200*time.Hour), time.Now().Add(-200*time.Hour))
	p, err := build(c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.retention) != 2 || p.retention[0].Sweep() != 1 {
		t.Fatalf("%d retentions; the log one did not remove a 200h-old log", len(p.retention))
	}
}
