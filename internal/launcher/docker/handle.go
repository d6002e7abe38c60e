package docker

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/websummoner/websummoner/internal/launcher"
)

// instance is one browser container: the handle the hub holds for a session.
type instance struct {
	l         *Launcher
	id        string
	name      string
	endpoints launcher.Endpoints // set once the container answers
	exited    chan struct{}
	once      sync.Once
	mu        sync.Mutex
	reason    string
	stop      sync.Once
	stopErr   error
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

// SessionCreated needs nothing: the container is labelled at creation, and its
// side services are the image's contract ports.
func (i *instance) SessionCreated(string, json.RawMessage) {}

func (i *instance) ExitReason() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.reason == "" {
		return "container running"
	}
	return i.reason
}

// Stop removes the container, within ctx and -session-delete-timeout. A removal
// that fails is returned and left to the sweep.
func (i *instance) Stop(ctx context.Context) error {
	i.stop.Do(func() { i.stopErr = i.l.removeNow(ctx, i) })
	return i.stopErr
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
