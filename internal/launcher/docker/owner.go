package docker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
)

// LabelHub names the hub process that made a container or network:
// "container:<id>" for a hub in a container of the engine, else
// "host:<boot id>:<pid>:<start time>". The instance lock is an abstract
// Unix socket, which holds within one network namespace only: two hub
// containers of one engine given the same -instance both start, and each
// swept the other's live browsers as an earlier run's. A sweep spares what
// a hub that still runs made (otherHubRuns).
const LabelHub = "websummoner.hub"

// hubID is this hub's LabelHub value, found once the engine answers. A hub
// container that restarts keeps its id, so what its earlier run left is its
// own to sweep.
func (l *Launcher) hubID(ctx context.Context) (string, error) {
	l.mu.Lock()
	id := l.hub
	l.mu.Unlock()
	if id != "" {
		return id, nil
	}
	self, _, err := l.findSelf(ctx)
	if err != nil {
		return "", err
	}
	if self != "" {
		id = "container:" + self
	} else {
		id = hostProcess(os.Getpid())
	}
	l.mu.Lock()
	l.hub = id
	l.mu.Unlock()
	return id, nil
}

// hostProcess is process pid's LabelHub value on this machine: a pid is
// reused, so its start time and the boot's id go with it.
func hostProcess(pid int) string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	// The fields after the command (which may hold spaces and ')'): state
	// is the first, the start time the 20th.
	start := ""
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 19 {
			start = f[19]
		}
	}
	return fmt.Sprintf("host:%s:%d:%s", strings.TrimSpace(string(boot)), pid, start)
}

// otherHubRuns reports whether owner, a LabelHub value, is another hub
// than this one, and still runs; known answers are kept in seen for the
// rest of a sweep. One that cannot be told (no label: an older hub's; a
// process in another PID namespace) is taken for gone, as every container
// of the instance was before. An engine that does not answer about a hub
// container keeps what it made, until a sweep can tell.
func (l *Launcher) otherHubRuns(ctx context.Context, owner string, seen map[string]bool) bool {
	me, err := l.hubID(ctx)
	if owner == "" || owner == me || err != nil && !strings.HasPrefix(owner, "container:") {
		return false
	}
	if runs, ok := seen[owner]; ok {
		return runs
	}
	runs := false
	switch kind, rest, _ := strings.Cut(owner, ":"); kind {
	case "container":
		info, err := l.engine.ContainerInspect(ctx, rest)
		runs = err != nil && !cerrdefs.IsNotFound(err) || err == nil && info.State != nil && info.State.Running
	case "host":
		if f := strings.Split(rest, ":"); len(f) == 3 {
			pid, _ := strconv.Atoi(f[1])
			runs = pid > 0 && f[2] != "" && hostProcess(pid) == owner
		}
	}
	seen[owner] = runs
	return runs
}

// hubLabel is hubID once known: Start finds it before anything is created.
func (l *Launcher) hubLabel() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hub
}
