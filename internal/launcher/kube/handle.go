package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// instance is one browser pod: the handle the hub holds for a session.
type instance struct {
	l         *Launcher
	name      string
	requestID string
	opts      webdriver.Options // the client's options: enableLog, logName

	exited   chan struct{} // closed when the pod ends or goes other than through Stop
	exitOnce sync.Once
	changed  chan struct{} // a word of the pod from the informer since Start last looked
	gone     chan struct{} // closed when the pod no longer exists
	goneOnce sync.Once
	stopping atomic.Bool // the hub deletes it: its going is no news

	mu        sync.Mutex
	pod       *corev1.Pod // the latest word of it
	ip        string
	reason    string
	endpoints launcher.Endpoints
	sessionID string

	stop    sync.Once
	stopErr error
}

func newInstance(l *Launcher, name string, r launcher.Request) *instance {
	return &instance{l: l, name: name, requestID: r.ID, opts: r.Options,
		exited: make(chan struct{}), changed: make(chan struct{}, 1), gone: make(chan struct{})}
}

// see takes a word of the pod from the informer.
func (i *instance) see(pod *corev1.Pod, deleted bool) {
	i.mu.Lock()
	i.pod = pod
	i.mu.Unlock()
	select {
	case i.changed <- struct{}{}:
	default:
	}
	if deleted {
		i.goneOnce.Do(func() { close(i.gone) })
	}
	if i.stopping.Load() {
		return // the hub ends it: not an exit of its own
	}
	if deleted {
		i.exit(fmt.Sprintf("pod %s was deleted", i.name))
		return
	}
	if why := ended(pod); why != "" {
		i.exit(why)
	}
}

func (i *instance) latest() *corev1.Pod {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.pod
}

// ended says why a pod no longer serves its session, or "" while it may.
func ended(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return fmt.Sprintf("pod %s is being deleted (kubectl delete, an eviction or a node drain)", pod.Name)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		// The browser's container: a recorder that fails leaves the session be.
		if t := cs.State.Terminated; t != nil && cs.Name == browserContainer {
			why := fmt.Sprintf("container %s of pod %s exited with code %d", cs.Name, pod.Name, t.ExitCode)
			if t.Reason == "OOMKilled" {
				why += " (killed: out of memory)"
			} else if t.Reason != "" {
				why += " (" + t.Reason + ")"
			}
			return why
		}
	}
	if p := pod.Status.Phase; p == corev1.PodFailed || p == corev1.PodSucceeded {
		why := fmt.Sprintf("pod %s ended (phase %s", pod.Name, p)
		if pod.Status.Reason != "" {
			why += ", " + pod.Status.Reason + ": " + pod.Status.Message
		}
		return why + ")"
	}
	return ""
}

func (i *instance) exit(reason string) {
	i.exitOnce.Do(func() {
		i.mu.Lock()
		i.reason = reason
		i.mu.Unlock()
		close(i.exited)
	})
}

func (i *instance) Endpoints() launcher.Endpoints {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.endpoints
}

func (i *instance) Exited() <-chan struct{} { return i.exited }
func (i *instance) Describe() string        { return i.name }

// ContainerInfo is the pod's name and address (launcher.Container), for
// /status's containerInfo.
func (i *instance) ContainerInfo() (string, string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.name, i.ip
}

func (i *instance) ExitReason() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.reason == "" {
		return "pod running"
	}
	return i.reason
}

// SessionCreated keeps the session id, the name of a kept log.
func (i *instance) SessionCreated(id string, _ json.RawMessage) {
	i.mu.Lock()
	i.sessionID = id
	i.mu.Unlock()
}

// Follow streams the browser container's output from its start, as the
// Docker launcher does.
func (i *instance) Follow(ctx context.Context, w io.Writer) error {
	rc, err := i.l.client.CoreV1().Pods(i.l.opts.Namespace).GetLogs(i.name, &corev1.PodLogOptions{Container: browserContainer, Follow: true}).Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// keepLog writes the browser container's whole output to -log-output-dir,
// when the session asked for it (or -save-all-logs), before the pod goes;
// each line begins with its timestamp, as Selenoid keeps them.
func (i *instance) keepLog(ctx context.Context) error {
	i.mu.Lock()
	id := i.sessionID
	i.mu.Unlock()
	if !i.l.opts.KeepLog(i.opts) || id == "" {
		return nil
	}
	rc, err := i.l.client.CoreV1().Pods(i.l.opts.Namespace).GetLogs(i.name, &corev1.PodLogOptions{Container: browserContainer, Timestamps: true}).Stream(ctx)
	if err != nil {
		return fmt.Errorf("reading pod %s's log: %w", i.name, err)
	}
	defer rc.Close()
	return i.l.opts.WriteKeptLog(i.opts, id, i.l.log, i.requestID, func(w io.Writer) error {
		_, err := io.Copy(w, rc)
		return err
	})
}

// Stop keeps the pod's log if asked, then deletes the pod and waits until it
// is gone, within ctx and -session-delete-timeout: until then its browser
// may still run, and it still counts against a ResourceQuota.
func (i *instance) Stop(ctx context.Context) error {
	i.stop.Do(func() {
		i.stopping.Store(true)
		// What is kept of the session (its video, its log) comes out of its
		// pod within -session-delete-timeout: the browser's container is
		// the client's, and what runs there could hold the slot for ever.
		keep, cancel := context.WithTimeout(ctx, i.l.opts.StopTimeout)
		defer cancel()
		video := make(chan struct{})
		go func() {
			defer close(video)
			if !i.opts.EnableVideo {
				return
			}
			// While the browser still runs: its screen is what is recorded,
			// and its container is the way the file comes out.
			name, err := i.finishVideo(keep)
			launcher.LogVideo(i.l.log, i.requestID, name, err)
		}()
		logErr := i.keepLog(keep)
		<-video
		cancel()
		i.stopErr = errors.Join(logErr, i.remove(ctx))
	})
	return i.stopErr
}

// remove deletes the pod and waits until the informer sees it gone. A
// deletion that fails (API server down) is returned and left to the sweep:
// the pod is no longer owned, so the next sweep takes it.
func (i *instance) remove(ctx context.Context) error {
	i.stopping.Store(true)
	defer i.l.forget(i)
	ctx, cancel := context.WithTimeout(ctx, i.l.opts.StopTimeout)
	defer cancel()
	err := i.l.deletePod(ctx, i.name)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		logtag.Event(i.l.log, slog.LevelWarn, i.requestID, "POD_DELETE_FAILED", i.name, err, "the sweep will retry")
		return fmt.Errorf("deleting pod %s: %w (the sweep retries every -sweep-interval)", i.name, err)
	}
	look := time.NewTicker(lookInterval) // as in run: the watch may lag
	defer look.Stop()
	for {
		select {
		case <-i.gone:
			return nil
		case <-look.C:
			i.l.look(ctx, i)
		case <-ctx.Done():
			logtag.Event(i.l.log, slog.LevelWarn, i.requestID, "POD_DELETE_SLOW", i.name, "still terminating after -session-delete-timeout; Kubernetes goes on deleting it")
			return fmt.Errorf("pod %s was still terminating after -session-delete-timeout %v", i.name, i.l.opts.StopTimeout)
		}
	}
}

// deletePod asks for a pod's deletion with a second's grace: its containers
// get SIGTERM, and the pod object goes once the node has stopped them.
func (l *Launcher) deletePod(ctx context.Context, name string) error {
	grace := int64(1)
	return l.client.CoreV1().Pods(l.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
}

// forget drops an instance from the pods the launcher owns.
func (l *Launcher) forget(i *instance) {
	l.mu.Lock()
	if l.pods[i.name] == i {
		delete(l.pods, i.name)
	}
	l.mu.Unlock()
}
