package docker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/launcher"
)

// BenchmarkSessionNetwork is what a session's own network adds to a Docker
// start and stop: creating the bridge network (and reading its gateway, for
// WEBSUMMONER_HUB_ADDRESSES) and removing it, through the launcher's own
// code, against the real engine.
func BenchmarkSessionNetwork(b *testing.B) {
	if noEngine != "" {
		b.Skip(noEngine) // TestMain fails in CI without an engine
	}
	instance := fmt.Sprintf("bench-network-%d", time.Now().UnixNano())
	l, err := New(Options{Options: launcher.Options{Instance: instance, StopTimeout: 10 * time.Second}}, engine, nil, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	defer func() {
		if n := l.sweepNetworks(ctx, true); n != 0 {
			b.Errorf("%d networks of the benchmark were left", n)
		}
	}()
	i := 0
	for b.Loop() {
		i++
		name := fmt.Sprintf("websummoner-%s-%d", instance, i)
		gw, err := l.createNetwork(ctx, name, fmt.Sprint(i))
		if err != nil {
			b.Fatalf("creating network %d: %v", i, err)
		}
		if gw == "" {
			b.Fatalf("network %d has no gateway", i)
		}
		if err := l.removeNetwork(ctx, name); err != nil {
			b.Fatalf("removing network %d: %v", i, err)
		}
	}
}
