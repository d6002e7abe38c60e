package docker

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtest"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// logsEngine answers ContainerLogs with a fixed output; nothing else is called.
type logsEngine struct {
	Engine
	out string
}

func (e logsEngine) ContainerLogs(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
	var buf bytes.Buffer
	stdcopy.NewStdWriter(&buf, stdcopy.Stdout).Write([]byte(e.out))
	return io.NopCloser(&buf), nil
}

// A kept container log whose logName exists in -log-output-dir (another
// user's) does not replace it: it gets the session id in its name, and a line
// says so (issue 33).
func TestKeptLogNeverReplacesAFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.log"), []byte("another user's log"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev, log := logtest.New(100)
	l := &Launcher{opts: Options{Options: launcher.Options{LogDir: dir}}, engine: logsEngine{out: "driver output\n"}, log: log}
	for _, id := range []string{"s-1", "s-2"} {
		i := &instance{l: l, id: "c-" + id, opts: webdriver.Options{EnableLog: true, LogName: "run.log"}, sessionID: id, requestID: "r"}
		if err := i.keepLog(context.Background()); err != nil {
			t.Fatal(err)
		}
		if line := ev.Wait(t, "LOG_RENAMED", time.Minute); !strings.Contains(line, "run-"+id+".log") {
			t.Errorf("logged %q", line)
		}
		if data, _ := os.ReadFile(filepath.Join(dir, "run-"+id+".log")); string(data) != "driver output\n" {
			t.Errorf("session %s's log holds %q", id, data)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "run.log")); string(data) != "another user's log" {
		t.Fatalf("the existing file now holds %q", data)
	}
}

// A video whose name exists in -video-output-dir is saved beside it, never
// over it, with no temporary file left.
func TestSavedVideoNeverReplacesAFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "checkout.mp4"), []byte("another user's video"), 0o644); err != nil {
		t.Fatal(err)
	}
	name, err := saveVideo(videoTar("frame"), dir, "checkout.mp4", "s-9", 5)
	if err != nil || name != "checkout-s-9.mp4" {
		t.Fatalf("saved as %q: %v", name, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "checkout.mp4")); string(data) != "another user's video" {
		t.Fatalf("the existing video now holds %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, name)); string(data) != "frame" {
		t.Fatalf("this session's video holds %q", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("files %v, want the two videos", entries)
	}
}

// A video over its bound (a recorder image that ignores VIDEO_MAX_SIZE) is
// not kept, and leaves no file: the copy out of the container is the hub's
// disk.
func TestSavedVideoOverItsBound(t *testing.T) {
	dir := t.TempDir()
	if name, err := saveVideo(videoTar("frames"), dir, "long.mp4", "s-1", 5); err == nil || !strings.Contains(err.Error(), "-video-max-size") {
		t.Fatalf("saved as %q: %v, want refused over -video-max-size", name, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files %v, want none", entries)
	}
}

// The recorder is told the bytes its file ends at; the copy out of it
// leaves room for the file's index.
func TestRecorderEnvBound(t *testing.T) {
	env := launcher.RecorderEnv(webdriver.Options{VideoName: "a.webm", VideoScreenSize: "1280x720", VideoFrameRate: 12, VideoCodec: "libvpx-vp9"}, 100<<20)
	if !slices.Contains(env, "VIDEO_MAX_SIZE=104857600") || !slices.Contains(env, "FILE_NAME=video.webm") {
		t.Fatalf("env %v", env)
	}
	if env := launcher.RecorderEnv(webdriver.Options{}, 0); slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "VIDEO_MAX_SIZE=") }) {
		t.Fatalf("no bound, yet %v", env)
	}
	if b := launcher.VideoReadBound(100 << 20); b <= 100<<20 || b > 200<<20 {
		t.Fatalf("read bound %d for 100 MiB", b)
	}
}
