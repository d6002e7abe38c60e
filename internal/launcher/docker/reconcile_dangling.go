package docker

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/websummoner/websummoner/internal/logtag"
)

// removeNow removes a container whatever its state, within ctx and the stop
// timeout. A removal that fails (engine down) is returned and left to the
// sweep: the container is no longer live, so the next sweep takes it.
func (l *Launcher) removeNow(ctx context.Context, inst *instance) error {
	// The container stays owned until it is gone, so a sweep never races this
	// removal with its own.
	defer func() {
		l.mu.Lock()
		delete(l.live, inst.id)
		if inst.recorder != nil {
			delete(l.recorders, inst.recorder.id)
		}
		l.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, l.opts.StopTimeout)
	defer cancel()
	if rec := inst.recorder; rec != nil {
		// First: it lives in the browser's network namespace.
		if err := l.engine.ContainerRemove(ctx, rec.id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			logtag.Event(l.log, slog.LevelWarn, inst.requestID, "CONTAINER_REMOVE_FAILED", shortID(rec.id), err, "the sweep will retry")
		}
	}
	err := l.engine.ContainerRemove(ctx, inst.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
		// Someone removes it already (docker rm -f): it is going, and the
		// sweep sees it gone.
		logtag.Event(l.log, slog.LevelDebug, inst.requestID, "CONTAINER_REMOVED_ELSEWHERE", shortID(inst.id))
		err = nil
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		// The sweep takes the container, then its network, which no live
		// session owns any more; its ports stay refused to sandboxed browsers
		// until the container is gone: it may publish them yet.
		l.mu.Lock()
		l.dangling[inst.id] = inst.published
		delete(l.networks, inst.network)
		l.mu.Unlock()
		logtag.Event(l.log, slog.LevelWarn, inst.requestID, "CONTAINER_REMOVE_FAILED", shortID(inst.id), err, "the sweep will retry")
		return fmt.Errorf("removing container %s: %w (the sweep retries every -sweep-interval)", shortID(inst.id), err)
	}
	l.opts.Published.Remove(inst.published...)
	inst.published = nil
	return l.dropNetwork(ctx, inst.network)
}

// dropNetwork removes a session's own network (none: "") and forgets it;
// one that cannot be removed now is left to the sweep. It takes at most the
// stop timeout: an engine that froze must not hold the start or the
// teardown that called it (the Docker client itself has no timeout).
func (l *Launcher) dropNetwork(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.StopTimeout)
	defer cancel()
	err := l.removeNetwork(ctx, name)
	l.mu.Lock()
	delete(l.networks, name)
	l.mu.Unlock()
	if err != nil {
		logtag.Event(l.log, slog.LevelWarn, "", "NETWORK_REMOVE_FAILED", name, err, "the sweep will retry")
	}
	return err
}

// sweep removes containers of this instance that no live session owns. At
// start-up and shutdown (all) every container of the instance goes: they are
// a previous run's, or this one's last. Otherwise a container is spared while
// it is being created. Either way what another hub of the instance that still
// runs made is spared (LabelHub).
func (l *Launcher) sweep(ctx context.Context, all bool) int {
	list, err := l.engine.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+l.opts.Instance))})
	if err != nil {
		logtag.Event(l.log, slog.LevelWarn, "", "SWEEP_FAILED", err)
		return 0
	}
	n, spared := 0, 0
	listed := map[string]bool{} // containers still there after this sweep
	seen := map[string]bool{}
	for _, c := range list {
		if l.otherHubRuns(ctx, c.Labels[LabelHub], seen) {
			spared++
			continue
		}
		l.mu.Lock()
		owned := l.live[c.ID] != nil || l.recorders[c.ID] != nil
		for _, cn := range c.Names {
			owned = owned || l.creating[strings.TrimPrefix(cn, "/")]
		}
		l.mu.Unlock()
		if owned && !all {
			listed[c.ID] = true
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, l.opts.StopTimeout)
		err := l.engine.ContainerRemove(rctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		if err == nil || cerrdefs.IsNotFound(err) {
			n++
		} else {
			listed[c.ID] = true // not gone yet
		}
	}
	// A container whose removal failed and that is no longer listed (or was
	// removed just now) is gone: the ports it published are free.
	var freed []uint16
	l.mu.Lock()
	for id, ports := range l.dangling {
		if !listed[id] {
			freed = append(freed, ports...)
			delete(l.dangling, id)
		}
	}
	l.mu.Unlock()
	l.opts.Published.Remove(freed...)
	if spared > 0 && all {
		var hubs []string
		for h, runs := range seen {
			if runs {
				hubs = append(hubs, h)
			}
		}
		sort.Strings(hubs)
		logtag.Event(l.log, slog.LevelWarn, "", "CONTAINERS_SPARED", strconv.Itoa(spared),
			fmt.Sprintf("made by another hub of -instance %s that still runs (%s): left alone; give each hub its own -instance", l.opts.Instance, strings.Join(hubs, ", ")))
	}
	if n > 0 {
		why := "no live session owns them"
		if all {
			why = "left by an earlier run of instance " + l.opts.Instance
		}
		logtag.Event(l.log, slog.LevelInfo, "", "CONTAINERS_REMOVED", strconv.Itoa(n), why)
	}
	// After the containers: a network is removable once nothing of the
	// session is on it.
	if m := l.sweepNetworks(ctx, all); m > 0 {
		logtag.Event(l.log, slog.LevelInfo, "", "NETWORKS_REMOVED", strconv.Itoa(m), "session networks no live session owns")
	}
	return n
}

// SweepAll removes every container of this instance (start-up and shutdown)
// but another running hub's.
func (l *Launcher) SweepAll(ctx context.Context) int { return l.sweep(ctx, true) }

// Sweep removes containers of this instance that no live session owns.
func (l *Launcher) Sweep(ctx context.Context) int { return l.sweep(ctx, false) }
