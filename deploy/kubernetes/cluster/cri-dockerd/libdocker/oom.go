// This file is added to cri-dockerd's package libdocker at build time (go
// build -overlay, scripts/k8s-build.sh), with one call of clampOOMScoreAdj
// inserted before CreateContainer's ContainerCreate.
//
// Why: cri-dockerd gives every pod sandbox oom_score_adj -998, and the kubelet
// gives Guaranteed pods' containers -997 (Burstable ones 2..999). Lowering an
// oom_score_adj below 0 needs CAP_SYS_RESOURCE, which this machine's
// capability bounding set lacks (a Firecracker VM whose init dropped it): runc
// then fails every such container with "can't get final child's PID from
// pipe: EOF". Where the capability is missing, a negative value is raised to
// 0; elsewhere nothing changes.

package libdocker

import (
	"os"
	"strconv"
	"strings"
	"sync"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
)

const capSysResource = 24

// canLowerOOMScoreAdj reads the capability bounding set once, at the first
// container created.
var canLowerOOMScoreAdj = sync.OnceValue(func() bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return true
			}
			if caps&(1<<capSysResource) == 0 {
				logrus.Warnf("CAP_SYS_RESOURCE is not in the capability bounding set: negative oom_score_adj of containers raised to 0")
				return false
			}
			return true
		}
	}
	return true
})

func clampOOMScoreAdj(hc *dockercontainer.HostConfig) {
	if hc != nil && hc.OomScoreAdj < 0 && !canLowerOOMScoreAdj() {
		hc.OomScoreAdj = 0
	}
}
