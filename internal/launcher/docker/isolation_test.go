package docker

import (
	"context"
	"testing"

	"github.com/docker/docker/api/types/network"
)

// gatewayless is an engine whose networks have a subnet but no gateway in
// their IPAM, as older engines report Docker's default bridge: a fake, as
// the engine here reports one.
type gatewayless struct{ Engine }

func (gatewayless) NetworkInspect(context.Context, string, network.InspectOptions) (network.Inspect, error) {
	return network.Inspect{IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: "127.0.0.0/8"}}},
		Options: map[string]string{"com.docker.network.bridge.name": "lo"}}, nil
}

// -container-network bridge on an engine that gives the default bridge no
// gateway: the hub's address there is its interface's (docker0; here lo,
// which every host has), where every session failed with "has no IPv4
// gateway" and Selenoid's worked.
func TestGatewayOfABridgeWithoutOne(t *testing.T) {
	l := &Launcher{engine: gatewayless{}}
	gw, err := l.gatewayOf(context.Background(), "bridge")
	if err != nil || gw != "127.0.0.1" {
		t.Fatalf("gateway %q, %v: want the bridge interface's address", gw, err)
	}
}
