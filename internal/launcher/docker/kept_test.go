package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
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
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "video.mp4", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("frame"))
	tw.Close()
	name, err := saveVideo(&buf, dir, "checkout.mp4", "s-9")
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
