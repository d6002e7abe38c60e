package docker

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/websummoner/websummoner/internal/egress"
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
	e, err := endpointsOf(ByIP, localEngine, info, "c1", "ws-session", "4444", "/", exposedSidePorts(map[string]struct{}{"8080/tcp": {}}))
	if err != nil || e.Driver.String() != "http://172.31.0.2:4444/" || e.Files.String() != "http://172.31.0.2:8080" {
		t.Fatalf("by address: %+v %v", e, err)
	}
	if ports := loopbackPorts(e); len(ports) != 0 {
		t.Errorf("by address, nothing is on the host's loopback; refused %v", ports)
	}
	if _, err := endpointsOf(ByIP, localEngine, container.InspectResponse{NetworkSettings: &container.NetworkSettings{}}, "c1", "ws-session", "4444", "/", nil); err == nil {
		t.Fatal("a container with no address accepted")
	}
}

// An engine over TCP (DOCKER_HOST=tcp://…) publishes ports on its own
// address, as Selenoid has them published; a local one on the loopback.
func TestPublishedOn(t *testing.T) {
	for host, want := range map[string]published{
		"unix:///var/run/docker.sock": localEngine,
		"tcp://localhost:2375":        localEngine,
		"tcp://10.0.0.5:2376":         {host: "10.0.0.5", bind: "10.0.0.5"},
		"tcp://[fd00::5]:2376":        {host: "fd00::5", bind: "fd00::5"},
		"tcp://docker.example:2375":   {host: "docker.example", bind: "0.0.0.0"},
		"npipe:////./pipe/docker":     localEngine,
	} {
		if got := publishedOn(host); got != want {
			t.Errorf("publishedOn(%q) = %+v, want %+v", host, got, want)
		}
	}
}

// Through an engine over TCP, the browser's driver is published on the
// engine's address and dialled there: on 127.0.0.1, the hub's own loopback,
// it was out of reach of a hub on another host. The engine's address here
// is 127.0.0.2, a forwarder to this engine's socket: not 127.0.0.1, yet on
// the loopback, the one network these tests may use.
func TestEngineOverTCP(t *testing.T) {
	needEngine(t)
	sock, err := client.ParseHostURL(engine.DaemonHost())
	if err != nil || sock.Scheme != "unix" {
		t.Skipf("the engine is not on a Unix socket (%s): nothing to forward", engine.DaemonHost())
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				u, err := net.Dial("unix", sock.Host) // ParseHostURL keeps a socket's path as Host
				if err != nil {
					return
				}
				defer u.Close()
				go func() { io.Copy(u, c); u.(*net.UnixConn).CloseWrite() }()
				io.Copy(c, u)
			})
		}
	}()
	// As the hub connects: DOCKER_HOST, read by NewEngine, which also
	// settles the API version before the client is shared.
	t.Setenv("DOCKER_HOST", "tcp://"+ln.Addr().String())
	remote, err := NewEngine()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remote.Close() })
	refused := &egress.PortSet{}
	l, lines := newLauncher(t, Options{Published: refused}, remote)
	inst, err := l.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop(context.Background())
	if h := inst.Endpoints().Driver.Hostname(); h != "127.0.0.2" {
		t.Fatalf("driver reached at %s, want the engine's address 127.0.0.2", inst.Endpoints().Driver)
	}
	resp, err := http.Get(inst.Endpoints().Driver.JoinPath("status").String())
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the driver at the engine's address: %v %v", err, resp)
	}
	resp.Body.Close()
	info, err := engine.ContainerInspect(context.Background(), inst.(*instance).id)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range info.HostConfig.PortBindings["4444/tcp"] {
		if b.HostIP != "127.0.0.2" {
			t.Errorf("published on %q, want the engine's address alone", b.HostIP)
		}
	}
	if m := lines.Wait(t, "reached over TCP", time.Second); !strings.Contains(m, "127.0.0.2") {
		t.Errorf("the start does not say where browsers are published: %s", m)
	}
	// No sandboxed local browser may reach the browser's ports; on a
	// loopback engine host they are refused one by one, the rest of the
	// loopback left to them (an engine host elsewhere is refused whole:
	// egress's TestCheck). Its containers accept the address the hub's
	// connections come from there.
	port, _ := strconv.ParseUint(inst.Endpoints().Driver.Port(), 10, 16)
	if !refused.Holds(uint16(port)) || refused.HoldsHost(netip.MustParseAddr("127.0.0.2")) {
		t.Errorf("refused to sandboxed browsers: port %d %v (want true), all of 127.0.0.2 %v (want false)", port, refused.Holds(uint16(port)), refused.HoldsHost(netip.MustParseAddr("127.0.0.2")))
	}
	if addrs := strings.Split(envOf(info.Config.Env, HubAddressesEnv), ","); !slices.Contains(addrs, "127.0.0.1") {
		t.Errorf("the container does not accept the hub's own address toward the engine: %s=%q", HubAddressesEnv, addrs)
	}
	if !sameAddr("fd00::5", "FD00:0::5") || sameAddr("fd00::5", "fd00::6") {
		t.Error("sameAddr compares text, not addresses")
	}
}
