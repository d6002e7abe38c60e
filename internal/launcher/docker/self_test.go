package docker

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
)

// The hub finds the id of its own container in the paths the engine mounts
// its per-container files from, whichever directory the engine keeps them
// in, and in a host name that is a short id; a VM's host name is no id.
func TestSelfCandidates(t *testing.T) {
	id := "4f1e0c5b2a9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f"
	mountinfo := []byte(`1520 1519 0:120 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/X
1530 1520 259:1 /var/lib/docker/containers/` + id + `/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/root rw
1531 1520 259:1 /var/lib/docker/containers/` + id + `/hostname /etc/hostname rw,relatime - ext4 /dev/root rw
1532 1520 259:2 /containers/` + id + `/hosts /etc/hosts rw,relatime - ext4 /dev/sdb rw
`)
	cases := []struct {
		mountinfo []byte
		host      string
		want      []string
	}{
		{mountinfo, id[:12], []string{id}},
		{mountinfo, "custom", []string{id}},
		{nil, id[:12], []string{id[:12]}},
		{[]byte("22 1 0:21 / / rw - overlay overlay rw\n"), "vm", nil},
		{nil, "0123456789ab0", nil},
		// The engine's host lists every running container's shm mount;
		// the hub there is in none of them.
		{[]byte(`22 1 0:21 / / rw - ext4 /dev/root rw
2254 29 0:272 / /var/lib/docker/containers/` + id + `/mounts/shm rw,nosuid,nodev,noexec,relatime shared:1159 - tmpfs shm rw,size=262144k
2260 29 0:280 / /run/docker/netns/3f2a rw shared:1160 - nsfs nsfs rw
`), "ci-vm", nil},
		// A file of the engine's mounted elsewhere is no sign either.
		{[]byte("1531 1520 259:1 /var/lib/docker/containers/" + id + "/hostname /mnt/h rw - ext4 /dev/root rw\n"), "vm", nil},
	}
	for _, c := range cases {
		if got := selfCandidates(c.mountinfo, c.host); !slices.Equal(got, c.want) {
			t.Errorf("selfCandidates(…, %q) = %q, want %q", c.host, got, c.want)
		}
	}
}

// Another container running on the engine, with its /dev/shm mounted on the
// engine's host (IPC "shareable", some engines' default), is not taken for
// the hub's own: a hub that did joined that container to session networks,
// and failed every start once it was gone.
func TestAnotherContainerIsNotTheHub(t *testing.T) {
	l, _ := newLauncher(t, Options{}, nil)
	ctx := context.Background()
	other, err := engine.ContainerCreate(ctx, &container.Config{Image: stubImage,
		Labels: map[string]string{LabelInstance: l.opts.Instance, LabelSession: "other"}},
		&container.HostConfig{IpcMode: container.IPCModeShareable}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.ContainerStart(ctx, other.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); !strings.Contains(string(mi), other.ID) {
		t.Log("this engine's host does not share its mounts with the tests: the check below is weaker")
	}
	self, _, err := l.findSelf(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if self == other.ID {
		t.Fatalf("the hub took container %s, another one on its engine, for its own", shortID(other.ID))
	}
}

// By address, the hub dials the container on the network it shares with it,
// not on another the container also joined (additionalNetworks).
func TestEndpointsByIP(t *testing.T) {
	info := container.InspectResponse{NetworkSettings: &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{
		"a-extra":    {IPAddress: "172.30.0.2"},
		"ws-session": {IPAddress: "172.31.0.2"},
	}}}
	e, err := endpointsOf(ByIP, info, "c1", "ws-session", "4444", "/", exposedSidePorts(map[string]struct{}{"8080/tcp": {}}))
	if err != nil || e.Driver.String() != "http://172.31.0.2:4444/" || e.Files.String() != "http://172.31.0.2:8080" {
		t.Fatalf("by address: %+v %v", e, err)
	}
	if ports := loopbackPorts(e); len(ports) != 0 {
		t.Errorf("by address, nothing is on the host's loopback; refused %v", ports)
	}
	if _, err := endpointsOf(ByIP, container.InspectResponse{NetworkSettings: &container.NetworkSettings{}}, "c1", "ws-session", "4444", "/", nil); err == nil {
		t.Fatal("a container with no address accepted")
	}
}
