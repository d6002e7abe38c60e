package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The project's recorder image stopped as Selenoid stops one (SIGTERM, then
// a wait) ends its file as it does on the hub's SIGINT: a playable video and
// exit status 0, at once. Stopped before the display is up, it exits at once
// too. The browser image gives it a real screen.
func TestRecorderEndsItsFileOnSIGTERM(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	browser, recorder := "ws-e2e-rec-browser-"+runID, "ws-e2e-rec-"+runID
	dir := t.TempDir()
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", browser, recorder, recorder+"-early").Run() })
	docker(t, "run", "-d", "--name", browser, "--label", "websummoner.e2e.run="+runID, "-e", "SCREEN_RESOLUTION=1280x720x24", chromeTag)
	docker(t, "run", "-d", "--name", recorder, "--label", "websummoner.e2e.run="+runID, "--network", "container:"+browser,
		"-v", dir+":/data", "-e", "FILE_NAME=term.mp4", "-e", "VIDEO_SIZE=1280x720", recorderTag)
	// Recording: ffmpeg runs and has begun the file.
	awaitProcess(t, recorder, "ffmpeg")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if fi, err := os.Stat(filepath.Join(dir, "term.mp4")); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorder never started its file: %s", docker(t, "logs", recorder))
		}
	}
	time.Sleep(2 * time.Second) // some frames to keep
	docker(t, "kill", "--signal", "TERM", recorder)
	if code := docker(t, "wait", recorder); code != "0" {
		t.Fatalf("the recorder stopped with SIGTERM exited %s, want 0: %s", code, docker(t, "logs", recorder))
	}
	if _, dur := ffprobe(t, filepath.Join(dir, "term.mp4")); dur <= 0 {
		t.Fatalf("the video stopped with SIGTERM lasts %vs", dur)
	}
	// Stopped while it still waits for a display that never comes.
	docker(t, "run", "-d", "--name", recorder+"-early", "--label", "websummoner.e2e.run="+runID, "-v", dir+":/data", "-e", "FILE_NAME=early.mp4", recorderTag)
	awaitProcess(t, recorder+"-early", "sleep") // in its wait for the display, its handler set
	docker(t, "kill", "--signal", "TERM", recorder+"-early")
	if code := docker(t, "wait", recorder+"-early"); code != "0" {
		t.Fatalf("a recorder stopped before its display came up exited %s, want 0", code)
	}
}

// awaitProcess waits, a minute at most, until a process whose command line
// has name runs in the container.
func awaitProcess(t *testing.T, container, name string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if out, err := exec.Command("docker", "top", container, "-o", "pid,args").Output(); err == nil && strings.Contains(string(out), name) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s process in %s within a minute", name, container)
		}
	}
}

// The project's recorder told VIDEO_MAX_SIZE (the hub's -video-max-size)
// ends its file there by itself: exit status 0 and a playable video a little
// over the bound (its index), however long the session goes on.
func TestRecorderEndsItsFileAtTheBound(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	browser, recorder := "ws-e2e-recmax-browser-"+runID, "ws-e2e-recmax-"+runID
	dir := t.TempDir()
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", browser, recorder).Run() })
	docker(t, "run", "-d", "--name", browser, "--label", "websummoner.e2e.run="+runID, "-e", "SCREEN_RESOLUTION=1280x720x24", chromeTag)
	const bound = 8000
	docker(t, "run", "-d", "--name", recorder, "--label", "websummoner.e2e.run="+runID, "--network", "container:"+browser,
		"-v", dir+":/data", "-e", "FILE_NAME=max.mp4", "-e", "VIDEO_SIZE=1280x720", "-e", fmt.Sprint("VIDEO_MAX_SIZE=", bound), recorderTag)
	// docker wait returns once the recorder has stopped by itself; the
	// context bounds a recorder that ignores the bound.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "wait", recorder).Output()
	if err != nil {
		t.Fatalf("the recorder did not stop at VIDEO_MAX_SIZE within 3 minutes (%v): %s", err, docker(t, "logs", recorder))
	}
	if code := strings.TrimSpace(string(out)); code != "0" {
		t.Fatalf("the recorder stopped at its bound with exit status %s, want 0: %s", code, docker(t, "logs", recorder))
	}
	fi, err := os.Stat(filepath.Join(dir, "max.mp4"))
	if err != nil {
		t.Fatalf("the recorder stopped at its bound without its file: %v", err)
	}
	if fi.Size() > 3*bound {
		t.Fatalf("the file has %d bytes, want at most %d (the bound and its index)", fi.Size(), 3*bound)
	}
	if _, dur := ffprobe(t, filepath.Join(dir, "max.mp4")); dur <= 0 {
		t.Fatalf("the video ended at its bound lasts %vs", dur)
	}
}

// docker runs the docker command and returns its output, trimmed; it fails
// the test if the command fails.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
