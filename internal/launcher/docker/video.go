package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
)

// LabelRole marks a container that is not a browser: "recorder" for a video
// recorder. The sweeps treat it as the browser's, by its instance label.
const LabelRole = "websummoner.role"

// recordingDir is where a recorder writes inside its container (Selenoid's
// recorder contract); the file is copied out when the recorder has stopped.
const recordingDir = "/data"

// recorder is a session's video recorder: a container of -video-recorder-image
// in the browser container's network namespace, recording its display.
type recorder struct {
	id   string
	file string // inside the container: "video" and the asked-for extension
}

// checkRecorder fails, before the browser container exists, when a session
// asks for video and the hub cannot record it.
func (l *Launcher) checkRecorder(ctx context.Context, r launcher.Request) error {
	if !r.Options.EnableVideo {
		return nil
	}
	if l.opts.VideoDir == "" || l.opts.VideoImage == "" {
		return &launcher.StartError{Phase: launcher.PhaseImage, Browser: r.Browser.String(),
			Msg: "enableVideo needs -video-output-dir, a directory the hub could create and write at start (a [INIT] warning says why not), and -video-recorder-image on this hub"}
	}
	_, err := l.engine.ImageInspect(ctx, l.opts.VideoImage)
	switch {
	case cerrdefs.IsNotFound(err):
		return &launcher.StartError{Phase: launcher.PhaseImage, Browser: r.Browser.String(),
			Msg: fmt.Sprintf("video recorder image %q (-video-recorder-image) is not on the Docker engine; build it with images/recorder/build.sh — the hub never pulls images", l.opts.VideoImage)}
	case err != nil:
		return l.startErr(ctx, r.Browser, launcher.PhaseImage, "inspecting the video recorder image", err)
	}
	return nil
}

// startRecorder starts the recorder next to a started browser container. Its
// display may not be up yet; the recorder waits for it.
func (l *Launcher) startRecorder(ctx context.Context, inst *instance, r launcher.Request, session string) error {
	o := r.Options
	rec := &recorder{file: launcher.RecordingFile(o.VideoName)}
	cfg := &container.Config{
		Image:  l.opts.VideoImage,
		Env:    launcher.RecorderEnv(o, l.opts.VideoMaxSize),
		Labels: map[string]string{LabelInstance: l.opts.Instance, LabelHub: l.hubLabel(), LabelSession: session, LabelBrowser: r.Browser.String(), LabelRole: "recorder"},
	}
	// It shares the browser's network: no raw sockets there either. It
	// encodes what the client's page shows, so it is bounded as a browser
	// is: the hub's -mem and -cpu (checked in New), and the same kind of
	// process limit.
	mem, _ := config.ParseMem(l.opts.Mem)
	cpu, _ := config.ParseCPU(l.opts.CPU)
	host := &container.HostConfig{NetworkMode: container.NetworkMode("container:" + inst.id), CapDrop: []string{"NET_RAW"},
		Resources: container.Resources{Memory: mem, NanoCPUs: cpu, PidsLimit: pidsLimit(l.opts.PidsLimit)}}
	name := inst.name + "-recorder"
	l.mu.Lock()
	l.creating[name] = true
	l.mu.Unlock()
	cctx, cancel := l.uncancelled(ctx)
	created, err := l.engine.ContainerCreate(cctx, cfg, host, nil, nil, name)
	cancel()
	l.mu.Lock()
	delete(l.creating, name)
	if err == nil {
		rec.id = created.ID
		inst.recorder = rec
		l.recorders[created.ID] = inst
	}
	l.mu.Unlock()
	if err != nil {
		return l.startErr(ctx, r.Browser, launcher.PhaseStart, "creating the video recorder", err)
	}
	if err := l.engine.ContainerStart(ctx, rec.id, container.StartOptions{}); err != nil {
		return l.startErr(ctx, r.Browser, launcher.PhaseStart, "starting the video recorder", err)
	}
	return nil
}

// finishVideo stops the recorder with SIGINT, so the file gets its index, and
// copies the file into -video-output-dir under its final name, through a
// temporary name: a listed video is always complete. removeNow removes the
// recorder afterwards. It returns the file's name.
func (i *instance) finishVideo(ctx context.Context) (string, error) {
	rec := i.recorder
	l := i.l
	timeout := int((l.opts.StopTimeout + time.Second - 1) / time.Second)
	i.mu.Lock()
	id := i.sessionID
	i.mu.Unlock()
	if id == "" {
		// No session was created (a failed start): nothing to keep, even
		// under a videoName, which would otherwise be taken by a failure.
		_ = l.engine.ContainerStop(ctx, rec.id, container.StopOptions{Timeout: &timeout})
		return "", nil
	}
	final := i.opts.VideoName
	if final == "" {
		final = launcher.SafeName(id) + path.Ext(rec.file)
	}
	// A recorder killed before the session ended (SIGKILL, or out of
	// memory) left a file without its index, which no player opens: say
	// so, and publish nothing. One that exited by itself (its display went
	// with a crashed browser) finished its file, which is kept.
	if ci, err := l.engine.ContainerInspect(ctx, rec.id); err == nil && ci.State != nil && !ci.State.Running && (ci.State.ExitCode == 137 || ci.State.OOMKilled) {
		return final, fmt.Errorf("video %s: the recorder was killed (exit code %d) before the session ended, so its file has no index and nothing is kept; its last output: %s", final, ci.State.ExitCode, i.recorderTail(ctx))
	}
	if err := l.engine.ContainerStop(ctx, rec.id, container.StopOptions{Signal: "SIGINT", Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("stopping the video recorder %s: %w", shortID(rec.id), err)
	}
	rc, _, err := l.engine.CopyFromContainer(ctx, rec.id, recordingDir+"/"+rec.file)
	if err != nil {
		return final, fmt.Errorf("video %s: the recorder left no file (%v); its last output: %s", final, err, i.recorderTail(ctx))
	}
	defer rc.Close()
	saved, err := saveVideo(rc, l.opts.VideoDir, final, id, launcher.VideoReadBound(l.opts.VideoMaxSize))
	if errors.Is(err, errEmptyVideo) {
		// ffmpeg made the file and wrote nothing to it: it could not write
		// this codec in this format (VP8 in MP4), or stopped at once.
		return "", fmt.Errorf("video %s: the recorder wrote nothing (a videoCodec its file's format cannot hold, such as vp8 in .mp4, needs a videoName ending .webm or .mkv); its last output: %s", final, i.recorderTail(ctx))
	}
	if err == nil && saved != final {
		logtag.Event(l.log, slog.LevelWarn, i.requestID, "VIDEO_RENAMED", fmt.Sprintf("%s exists in -video-output-dir; this session's video is %s", final, saved))
	}
	return saved, err
}

// recorderTail is the last of the recorder's output, for a failure's
// message: the container is removed with the session, so pointing at
// `docker logs` would name nothing.
func (i *instance) recorderTail(ctx context.Context) string {
	rc, err := i.l.engine.ContainerLogs(ctx, i.recorder.id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "3"})
	if err != nil {
		return "(none: " + err.Error() + ")"
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 4096)); err != nil && out.Len() == 0 {
		return "(unreadable: " + err.Error() + ")"
	}
	text := strings.Join(strings.FieldsFunc(out.String(), func(r rune) bool { return r < ' ' || r == 0x7f || r == utf8.RuneError }), " ")
	if len(text) > 300 {
		text = "…" + text[len(text)-300:]
	}
	if text == "" {
		return "(none)"
	}
	return text
}

// errEmptyVideo is a recorder's file with nothing in it: no video.
var errEmptyVideo = errors.New("the recorder's file is empty")

// saveVideo writes the one file of a tar stream (what the engine copies out of
// a container) to dir/name, through a hidden temporary name, and returns the
// name it has: where name exists (another session's video), one with the
// session id in it (launcher.RenameKept). A file over most bytes is not
// kept.
func saveVideo(r io.Reader, dir, name, sessionID string, most int64) (string, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the copy held no file")
			}
			return "", fmt.Errorf("video %s: %w", name, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size == 0 {
			return "", errEmptyVideo
		}
		if h.Size > most {
			return "", fmt.Errorf("video %s: %d MiB, over -video-max-size and its index's room (%d MiB), is not kept: the recorder image ignored VIDEO_MAX_SIZE (the project's images/recorder honours it)", name, h.Size>>20, most>>20)
		}
		tok := make([]byte, 4)
		_, _ = rand.Read(tok)
		tmp := filepath.Join(dir, "."+name+"."+hex.EncodeToString(tok)+".part")
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return "", fmt.Errorf("video %s: %w (check -video-output-dir)", name, err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		saved := ""
		if err == nil {
			saved, err = launcher.RenameKept(tmp, dir, name, sessionID)
		}
		if err != nil {
			_ = os.Remove(tmp)
			return "", fmt.Errorf("video %s: %w", name, err)
		}
		return saved, nil
	}
}
