package docker

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

// Run is Prepare, then Watch.
func (l *Launcher) Run(ctx context.Context) {
	l.Prepare(ctx)
	l.Watch(ctx)
}

// Prepare pings the engine and removes what an earlier run of this instance
// left. The hub calls it before it announces itself, so the first request finds
// the engine's state known.
func (l *Launcher) Prepare(ctx context.Context) {
	l.checkHealth(ctx)
	if l.health.Up() {
		l.sweep(ctx, true)
	}
}

// Watch follows container deaths, the engine's health and the periodic sweep
// until ctx ends.
func (l *Launcher) Watch(ctx context.Context) {
	go l.watchEvents(ctx)
	l.health.Tend(ctx, l.opts.HealthInterval, l.opts.SweepInterval, l.checkHealth,
		func(ctx context.Context) { l.sweep(ctx, false) },
		func(ctx context.Context) {
			// Deaths missed while the engine was away, then what they left.
			l.reconcile(ctx)
			l.sweep(ctx, false)
		})
}

// Ready reports whether browsers can be started now.
func (l *Launcher) Ready() (bool, string) { return l.health.Ready() }

func (l *Launcher) checkHealth(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := l.engine.Ping(pctx); err != nil {
		l.health.MarkDown(err)
		return
	}
	l.health.MarkUp()
}

// watchEvents turns container deaths into Exited, resubscribing when the engine
// connection breaks.
func (l *Launcher) watchEvents(ctx context.Context) {
	for ctx.Err() == nil {
		msgs, errs := l.engine.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("event", string(events.ActionDie)),
			filters.Arg("label", LabelInstance+"="+l.opts.Instance))})
		l.reconcile(ctx) // deaths missed while not subscribed
	recv:
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-msgs:
				l.mu.Lock()
				inst := l.live[m.Actor.ID]
				l.mu.Unlock()
				if inst != nil {
					reason := fmt.Sprintf("container %s exited with code %s", shortID(m.Actor.ID), m.Actor.Attributes["exitCode"])
					ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
					if info, err := l.engine.ContainerInspect(ictx, m.Actor.ID); err == nil && info.State != nil && info.State.OOMKilled {
						reason += " (killed: out of memory)"
					}
					cancel()
					inst.exit(reason)
				}
			case <-errs:
				break recv
			}
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reconcile inspects every live container and reports those that are gone or
// no longer running.
func (l *Launcher) reconcile(ctx context.Context) {
	l.mu.Lock()
	insts := make([]*instance, 0, len(l.live))
	for _, i := range l.live {
		if i.endpoints.Driver != nil { // started; one still starting is watched by its Start
			insts = append(insts, i)
		}
	}
	l.mu.Unlock()
	for _, i := range insts {
		info, err := l.engine.ContainerInspect(ctx, i.id)
		switch {
		case cerrdefs.IsNotFound(err):
			i.exit(fmt.Sprintf("container %s is gone", shortID(i.id)))
		case err == nil && info.State != nil && !info.State.Running:
			reason := fmt.Sprintf("container %s exited with code %d", shortID(i.id), info.State.ExitCode)
			if info.State.OOMKilled {
				reason += " (killed: out of memory)"
			}
			i.exit(reason)
		}
	}
}
