package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// instance is one browser container: the handle the hub holds for a session.
type instance struct {
	l         *Launcher
	id        string
	name      string
	network   string             // the session's own network; "" on a shared one
	endpoints launcher.Endpoints // set once the container answers
	exited    chan struct{}
	once      sync.Once
	mu        sync.Mutex
	reason    string
	stop      sync.Once
	stopErr   error
	opts      webdriver.Options // the client's options: enableLog, logName, video
	sessionID string
	requestID string
	recorder  *recorder // set when the session records video
	// published are the container's ports on the host's loopback, refused
	// to sandboxed browsers (Options.Published) until it is removed.
	published []uint16
	ip        string // its address on its network, once inspected
}

func (i *instance) exit(reason string) {
	i.once.Do(func() {
		i.mu.Lock()
		i.reason = reason
		i.mu.Unlock()
		close(i.exited)
	})
}

func (i *instance) Endpoints() launcher.Endpoints { return i.endpoints }
func (i *instance) Exited() <-chan struct{}       { return i.exited }
func (i *instance) Describe() string              { return shortID(i.id) }

// ContainerInfo is the container's full id and address (launcher.Container).
func (i *instance) ContainerInfo() (string, string) { return i.id, i.ip }

// SessionCreated keeps the session id, the name of a kept log; the container is
// labelled at creation and its side services are the image's contract ports.
func (i *instance) SessionCreated(id string, _ json.RawMessage) {
	i.mu.Lock()
	i.sessionID = id
	i.mu.Unlock()
}

// Follow streams the container's output (stdout and stderr) from its start,
// as Selenoid does: a viewer that comes late still sees the driver's
// start-up lines.
func (i *instance) Follow(ctx context.Context, w io.Writer) error {
	rc, err := i.l.engine.ContainerLogs(ctx, i.id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = stdcopy.StdCopy(w, w, rc)
	return err
}

// keepLog writes the container's whole output to -log-output-dir, when the
// session asked for it (or -save-all-logs), before the container goes; each
// line begins with the engine's timestamp, as Selenoid keeps them.
func (i *instance) keepLog(ctx context.Context) error {
	i.mu.Lock()
	id := i.sessionID
	i.mu.Unlock()
	if !i.l.opts.KeepLog(i.opts) || id == "" {
		return nil
	}
	rc, err := i.l.engine.ContainerLogs(ctx, i.id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true})
	if err != nil {
		return fmt.Errorf("reading the container's log: %w", err)
	}
	defer rc.Close()
	return i.l.opts.WriteKeptLog(i.opts, id, i.l.log, i.requestID, func(w io.Writer) error {
		_, err := stdcopy.StdCopy(w, w, rc)
		return err
	})
}

func (i *instance) ExitReason() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.reason == "" {
		return "container running"
	}
	return i.reason
}

// Stop keeps the container's log and finishes its video if asked, then
// removes the container and its recorder, within
// ctx and -session-delete-timeout. A removal that fails is returned and left to
// the sweep.
func (i *instance) Stop(ctx context.Context) error {
	i.stop.Do(func() {
		video := make(chan struct{})
		go func() {
			defer close(video)
			if i.recorder == nil {
				return
			}
			// While the browser still runs: its screen is what is recorded.
			name, err := i.finishVideo(ctx)
			launcher.LogVideo(i.l.log, i.requestID, name, err)
		}()
		logErr := i.keepLog(ctx)
		<-video
		i.stopErr = errors.Join(logErr, i.l.removeNow(ctx, i))
	})
	return i.stopErr
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
