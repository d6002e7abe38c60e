package kube

import (
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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
)

// Video, as in the Docker launcher's contract: a recorder of
// -video-recorder-image beside the browser, in the same pod, so it shares
// the browser's network namespace and reaches its display; it writes into
// a volume of the pod's own. When the session ends the hub stops the
// recorder with SIGINT (through exec, as a pod's containers cannot be
// signalled one by one), waits for it to exit — ffmpeg has then written the
// file's index — and reads the file out through the browser container,
// which mounts the same volume read-only and outlives it.
const (
	recorderContainer = "recorder"
	videoVolume       = "video"
	recordingDir      = "/data"                  // the recorder's, as in Selenoid's recorder contract
	videoMount        = "/var/websummoner-video" // the browser container's view of it
)

// Execer runs a command in a container of a pod, its output to stdout: the
// pods/exec subresource, through the API server.
type Execer interface {
	Exec(ctx context.Context, namespace, pod, container string, cmd []string, stdout io.Writer) error
}

// NewExecer returns the Execer of a cluster: client-go's WebSocket executor,
// falling back to SPDY for an API server that has no WebSocket exec.
func NewExecer(cfg *rest.Config, client kubernetes.Interface) Execer {
	return &execer{cfg: cfg, client: client}
}

type execer struct {
	cfg    *rest.Config
	client kubernetes.Interface
}

func (e *execer) Exec(ctx context.Context, namespace, pod, container string, cmd []string, stdout io.Writer) error {
	req := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(e.cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, fallBack)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: &stderr})
	if err != nil && stderr.Len() > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return err
}

// fallBack says whether an exec over WebSocket failed for the want of it, to
// be tried again over SPDY. Only a refused upgrade does: a command that ran
// and failed would otherwise run twice (a video's bytes copied twice into
// one file).
func fallBack(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// videoFile is the recording's name inside the pod.
func videoFile(videoName string) string { return launcher.RecordingFile(videoName) }

// addRecorder puts the recorder and the volume it writes to into the pod.
// The recorder runs under the hub's -mem and -cpu, as the Docker launcher's
// does (the entry's are the browser's): a page can make it encode without
// end, and a ResourceQuota on memory or CPU refuses a container without them.
func (l *Launcher) addRecorder(pod *corev1.Pod, r launcher.Request) error {
	res, err := l.resources(&config.Browser{})
	if err != nil {
		return fmt.Errorf("the video recorder's resources (-mem, -cpu): %v", err)
	}
	o := r.Options
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: videoVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	b := &pod.Spec.Containers[0]
	b.VolumeMounts = append(b.VolumeMounts, corev1.VolumeMount{Name: videoVolume, MountPath: videoMount, ReadOnly: true})
	var env []corev1.EnvVar
	for _, kv := range launcher.RecorderEnv(o, l.opts.VideoMaxSize) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
		Name: recorderContainer, Image: l.opts.VideoImage, ImagePullPolicy: corev1.PullNever, Env: env,
		VolumeMounts: []corev1.VolumeMount{{Name: videoVolume, MountPath: recordingDir}},
		Resources:    res,
		// It shares the browser's network: no raw sockets there either.
		SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}},
	})
	return nil
}

// finishVideo stops the recorder, waits for it to exit, and copies its file
// into -video-output-dir under its final name, through a temporary name: a
// listed video is always complete. It returns the file's name.
func (i *instance) finishVideo(ctx context.Context) (string, error) {
	l := i.l
	i.mu.Lock()
	id := i.sessionID
	i.mu.Unlock()
	if err := l.opts.Exec.Exec(ctx, l.opts.Namespace, i.name, recorderContainer, []string{"sh", "-c", "kill -INT 1"}, io.Discard); err != nil && !recorderEnded(i.latest()) {
		return "", fmt.Errorf("stopping the video recorder of pod %s: %w", i.name, err)
	}
	for !recorderEnded(i.latest()) {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the video recorder of pod %s did not finish its file within -session-delete-timeout: %w", i.name, ctx.Err())
		case <-i.changed:
		case <-time.After(time.Second): // a word of the pod taken by no one: look again
		}
	}
	final := i.opts.VideoName
	if final == "" {
		if id == "" {
			return "", nil // no session was created: nothing to keep
		}
		final = launcher.SafeName(id) + path.Ext(videoFile(""))
	}
	tok := make([]byte, 4)
	_, _ = rand.Read(tok)
	tmp := filepath.Join(l.opts.VideoDir, "."+final+"."+hex.EncodeToString(tok)+".part")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("video %s: %w (check -video-output-dir)", final, err)
	}
	// The browser's container is the client's: what runs there as cat may
	// send anything, for as long as ctx lets it (-session-delete-timeout),
	// and no more than the recording's bound, or maxVideoSize.
	most := min(launcher.VideoReadBound(l.opts.VideoMaxSize), maxVideoSize)
	err = l.opts.Exec.Exec(ctx, l.opts.Namespace, i.name, browserContainer, []string{"cat", videoMount + "/" + videoFile(i.opts.VideoName)}, &capped{w: f, left: most})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if st, serr := os.Stat(tmp); err == nil && serr == nil && st.Size() == 0 {
		// ffmpeg made the file and wrote nothing to it: it could not write
		// this codec in this format (VP8 in MP4), or stopped at once.
		err = errors.New("the recorder wrote nothing (a videoCodec its file's format cannot hold, such as vp8 in .mp4, needs a videoName ending .webm or .mkv)")
	}
	saved := ""
	if err == nil {
		saved, err = launcher.RenameKept(tmp, l.opts.VideoDir, final, id)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return final, fmt.Errorf("video %s: reading it out of pod %s: %w", final, i.name, err)
	}
	if saved != final {
		logtag.Event(l.log, slog.LevelWarn, i.requestID, "VIDEO_RENAMED", fmt.Sprintf("%s exists in -video-output-dir; this session's video is %s", final, saved))
	}
	return saved, nil
}

// maxVideoSize bounds a video read out of a pod under -video-max-size 0: a
// container that sends without end does not fill the disk.
const maxVideoSize = 4 * launcher.DefaultVideoMaxSize

// errVideoTooLarge is a video read-out past its bound.
var errVideoTooLarge = errors.New("it is larger than -video-max-size and its index's room, the most the hub reads out of a pod")

// capped writes to w until left bytes are written, then fails.
type capped struct {
	w    io.Writer
	left int64
}

func (c *capped) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, errVideoTooLarge
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// recorderEnded reports a pod whose recorder has exited.
func recorderEnded(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == recorderContainer {
			return cs.State.Terminated != nil
		}
	}
	return false
}
