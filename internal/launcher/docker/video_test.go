package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/websummoner/websummoner/internal/launcher"
)

// videoTar is what the engine copies out of a recorder that wrote data.
func videoTar(data string) *bytes.Buffer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "video.mp4", Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
	tw.Write([]byte(data))
	tw.Close()
	return &buf
}

// A copied-out video lands under its final name only when whole: no temporary
// file is left, and an empty copy is an error.
func TestSaveVideo(t *testing.T) {
	dir := t.TempDir()
	buf := videoTar("frame")
	stream := bytes.Clone(buf.Bytes())
	if _, err := saveVideo(buf, dir, "s1.mp4", "s1", 1<<20); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if data, _ := os.ReadFile(filepath.Join(dir, "s1.mp4")); string(data) != "frame" || len(entries) != 1 {
		t.Fatalf("saved %q, %d entries in the directory", data, len(entries))
	}
	var empty bytes.Buffer
	tar.NewWriter(&empty).Close()
	if _, err := saveVideo(&empty, dir, "s2.mp4", "s2", 1<<20); err == nil || !strings.Contains(err.Error(), "no file") {
		t.Fatalf("an empty copy: %v", err)
	}
	if _, err := saveVideo(bytes.NewReader(stream), filepath.Join(dir, "missing"), "s3.mp4", "s3", 1<<20); err == nil || !strings.Contains(err.Error(), "-video-output-dir") {
		t.Fatalf("an unwritable directory: %v", err)
	}
	// A recorder whose ffmpeg could not write its codec in the file's format
	// (vp8 in .mp4) leaves an empty file: no video, and none is kept, where
	// one was listed and served as the session's.
	if _, err := saveVideo(videoTar(""), dir, "s4.mp4", "s4", 1<<20); !errors.Is(err, errEmptyVideo) {
		t.Fatalf("an empty file: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d entries in the directory after an empty video, want s1.mp4 alone", len(entries))
	}
}

// enableVideo without a place to write or an image to record with fails before
// any container exists, saying which flag to set.
func TestVideoRefusedWithoutRecorder(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{}, "-video-recorder-image on this hub"},
		{Options{VideoDir: t.TempDir(), VideoImage: "websummoner/no-such-recorder:none"}, "images/recorder/build.sh"},
	} {
		l, _ := newLauncher(t, c.opts, nil)
		r := stubRequest()
		r.Options.EnableVideo = true
		_, err := l.Start(context.Background(), r)
		var se *launcher.StartError
		if !errors.As(err, &se) || se.Phase != launcher.PhaseImage || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: %v, want an image-phase error naming %q", c.opts, err, c.want)
		}
		if n := len(containersOf(t, l.opts.Instance)); n != 0 {
			t.Fatalf("%d containers after a refused start", n)
		}
	}
}

// A recorded session's recorder runs beside the browser, labelled as a
// recorder, and goes with it. The stub image stands in for the recorder here
// (it records nothing, so the loss is logged); e2e/liveview_test.go records a
// real screen with the real recorder image.
func TestRecorderLifecycle(t *testing.T) {
	dir := t.TempDir()
	l, ev := newLauncher(t, Options{VideoDir: dir, VideoImage: stubImage, PidsLimit: 2048, Mem: "512m", CPU: "0.5"}, nil)
	r := stubRequest()
	r.Options.EnableVideo, r.Options.VideoScreenSize, r.Options.VideoFrameRate, r.Options.VideoCodec = true, "1920x1080", 12, "libx264"
	inst, err := l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	list := containersOf(t, l.opts.Instance)
	roles := map[string]int{}
	for _, c := range list {
		roles[c.Labels[LabelRole]]++
	}
	if len(list) != 2 || roles["recorder"] != 1 {
		t.Fatalf("containers %d, roles %v; want a browser and a recorder", len(list), roles)
	}
	for _, c := range list {
		// The recorder shares the browser's network and is bounded as it is.
		info, err := engine.ContainerInspect(context.Background(), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if hc := info.HostConfig; !slices.ContainsFunc(hc.CapDrop, func(c string) bool { return strings.TrimPrefix(c, "CAP_") == "NET_RAW" }) || hc.PidsLimit == nil || *hc.PidsLimit != 2048 {
			t.Errorf("%s: CapDrop %v PidsLimit %v, want NET_RAW dropped and 2048", c.Labels[LabelRole], hc.CapDrop, hc.PidsLimit)
		}
		if hc := info.HostConfig; hc.Memory != 512<<20 || hc.NanoCPUs != 5e8 {
			t.Errorf("%s: Memory %d NanoCPUs %d, want -mem 512m and -cpu 0.5", c.Labels[LabelRole], hc.Memory, hc.NanoCPUs)
		}
	}
	if n := l.Sweep(context.Background()); n != 0 {
		t.Fatalf("the sweep removed %d containers of a live session", n)
	}
	inst.SessionCreated("s1", nil)
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev.Wait(t, "[VIDEO_FAILED]", 30*time.Second)
	if n := len(containersOf(t, l.opts.Instance)); n != 0 {
		t.Fatalf("%d containers after Stop", n)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a failed recording left %d files", len(entries))
	}
}

// killedRecorder is the real engine, saying the recorder was killed: the
// stub image that stands in for the recorder exits by itself at once, so a
// kill cannot be timed on it.
type killedRecorder struct{ Engine }

func (e killedRecorder) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	ci, err := e.Engine.ContainerInspect(ctx, id)
	if err == nil && ci.State != nil && ci.Config != nil && ci.Config.Labels[LabelRole] == "recorder" {
		ci.State.Running, ci.State.ExitCode = false, 137
	}
	return ci, err
}

// A recorder killed before its session ended leaves a file without its
// index, which no player opens: nothing is kept, and the failure says how
// the recorder ended and what it last wrote (not `docker logs` of a
// container removed with the session). A failed start keeps no video, even
// under a videoName.
func TestRecorderThatEndedEarlyKeepsNothing(t *testing.T) {
	dir := t.TempDir()
	l, ev := newLauncher(t, Options{VideoDir: dir, VideoImage: stubImage}, killedRecorder{engine})
	r := stubRequest()
	r.Options.EnableVideo, r.Options.VideoName = true, "killed.mp4"
	inst, err := l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	inst.SessionCreated("s1", nil)
	var recorder string
	for _, c := range containersOf(t, l.opts.Instance) {
		if c.Labels[LabelRole] == "recorder" {
			recorder = c.ID
		}
	}
	if out, err := exec.Command("docker", "wait", recorder).CombinedOutput(); err != nil {
		t.Fatalf("docker wait: %v %s", err, out)
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	line := ev.Wait(t, "[VIDEO_FAILED]", 30*time.Second)
	if !strings.Contains(line, "killed.mp4") || !strings.Contains(line, "was killed (exit code 137)") || !strings.Contains(line, "wdstub") || strings.Contains(line, "docker logs") {
		t.Fatalf("the failure says %q", line)
	}
	t.Log(line)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a killed recording left %d files", len(entries))
	}

	// A start that failed after the recorder began: no session, no video.
	r.Options.VideoName = "failed-start.mp4"
	inst, err = l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a failed start left %d files", len(entries))
	}
	if n := len(containersOf(t, l.opts.Instance)); n != 0 {
		t.Fatalf("%d containers after Stop", n)
	}
}
