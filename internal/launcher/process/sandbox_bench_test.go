package process

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/netns"
)

// BenchmarkSandboxStart is what isolation adds to a local session's start:
// the stub driver (cmd/wdstub) started until it answers, then stopped and
// everything of it released, on the host ("off") and in a sandbox of its
// own ("on": bubblewrap's namespaces and mounts, the sandbox's address, its
// proxy's listener, the readiness poll through the sandbox's loopback).
func BenchmarkSandboxStart(b *testing.B) {
	dial := netns.New(net.Dialer{Timeout: 5 * time.Second})
	sbx, err := NewSandbox(dial)
	if err != nil {
		if os.Getenv("CI") != "" {
			b.Fatalf("CI installs bubblewrap (scripts/deps.sh), so the sandbox must work: %v", err)
		}
		b.Logf("no sandbox on this machine, only sandbox=off runs: %v", err)
	}
	// The sandbox's user must reach the stub, as it does a driver in /usr.
	if err := os.Chmod(filepath.Dir(stub), 0o755); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sbx  *Sandbox
	}{{"sandbox=off", nil}, {"sandbox=on", sbx}} {
		b.Run(c.name, func(b *testing.B) {
			if c.name == "sandbox=on" && c.sbx == nil {
				b.Skip("no sandbox on this machine")
			}
			tr := &http.Transport{DialContext: dial.DialContext}
			defer tr.CloseIdleConnections()
			l := newLauncher(b, Options{Options: launcher.Options{ReadyTransport: tr}, Sandbox: c.sbx, DownloadDir: b.TempDir()})
			defer l.Close()
			ctx := context.Background()
			for b.Loop() {
				inst, err := l.Start(ctx, req())
				if err != nil {
					b.Fatalf("start: %v", err)
				}
				if err := inst.Stop(ctx); err != nil {
					b.Fatalf("stop: %v", err)
				}
			}
		})
	}
}
