package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/launcher/launchertest"
	"github.com/websummoner/websummoner/internal/logtest"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// An entry without "shmSize" gets Selenoid's 256 MiB of /dev/shm, not
// Docker's 64 MiB, which crashes Chromium's tabs; one that sets it keeps it.
func TestContainerShmSizeAsSelenoid(t *testing.T) {
	l := &Launcher{opts: Options{Address: Published}}
	for _, c := range []struct {
		set, want int64
	}{
		{0, 256 << 20},
		{-1, 256 << 20}, // Selenoid's getShmSize takes what is not positive as unset
		{1 << 30, 1 << 30},
		{64 << 20, 64 << 20},
	} {
		r := launcher.Request{ID: "1", Browser: config.Resolved{Name: "chrome", Version: "1", Browser: &config.Browser{
			Image: config.Image{Name: "img"}, ShmSize: c.set}}}
		_, host, err := l.containerConfig(r, "1-a", nil)
		if err != nil {
			t.Fatal(err)
		}
		if host.ShmSize != c.want {
			t.Errorf("\"shmSize\": %d gives %d bytes of /dev/shm, want %d", c.set, host.ShmSize, c.want)
		}
	}
}

// A container runs in the client's "timeZone" when the hub knows it, else in
// the hub's own zone, as under Selenoid; an unknown one is logged.
func TestContainerTimeZoneAsSelenoid(t *testing.T) {
	lines, log := logtest.New(10)
	l := &Launcher{opts: Options{Options: launcher.Options{TimeZone: "Europe/Berlin"}, Address: Published}, log: log}
	for _, c := range []struct {
		client, want string
	}{
		{"", "Europe/Berlin"},
		{"Asia/Tokyo", "Asia/Tokyo"},
		{"Mars/Olympus_Mons", "Europe/Berlin"},
	} {
		r := launcher.Request{ID: "2", Browser: config.Resolved{Name: "chrome", Version: "1", Browser: &config.Browser{
			Image: config.Image{Name: "img"}}}, Options: webdriver.Options{TimeZone: c.client}}
		cfg, _, err := l.containerConfig(r, "2-a", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tz := envOf(cfg.Env, "TZ"); tz != c.want {
			t.Errorf("timeZone %q: the container's TZ is %q, want %q (env %v)", c.client, tz, c.want, cfg.Env)
		}
	}
	if m := lines.Wait(t, "BAD_TIMEZONE", time.Second); !strings.Contains(m, "Mars/Olympus_Mons") {
		t.Errorf("BAD_TIMEZONE does not name the zone: %s", m)
	}
}

func envOf(env []string, name string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// "mem" and "cpu" mean what they mean to Selenoid: Docker's RAMInBytes and a
// float; "0" is no limit and does not fall back to -mem or -cpu.
func TestContainerLimitsAsSelenoid(t *testing.T) {
	l := &Launcher{opts: Options{Mem: "512MB", CPU: "1.5", Address: Published}}
	for _, c := range []struct {
		mem, cpu         string
		wantMem, wantCPU int64
	}{
		{"", "", 512 << 20, 15e8},
		{"1gb", "0.25", 1 << 30, 25e7},
		{"1GiB", "2", 1 << 30, 2e9},
		{"2t", "1", 2 << 40, 1e9},
		{"0", "0", 0, 0},
	} {
		r := launcher.Request{ID: "3", Browser: config.Resolved{Name: "chrome", Version: "1", Browser: &config.Browser{
			Image: config.Image{Name: "img"}, Mem: c.mem, CPU: c.cpu}}}
		_, host, err := l.containerConfig(r, "3-a", nil)
		if err != nil {
			t.Fatalf("mem %q cpu %q: %v", c.mem, c.cpu, err)
		}
		if host.Memory != c.wantMem || host.NanoCPUs != c.wantCPU {
			t.Errorf("mem %q cpu %q: Memory %d NanoCPUs %d, want %d %d", c.mem, c.cpu, host.Memory, host.NanoCPUs, c.wantMem, c.wantCPU)
		}
	}
	for _, flags := range []Options{{Mem: "1gb", CPU: "0"}, {Mem: "0", CPU: "0.5"}} {
		if err := flags.Validate(); err != nil {
			t.Errorf("-mem %q -cpu %q refused: %v", flags.Mem, flags.CPU, err)
		}
	}
	for _, flags := range []Options{{Mem: "lots"}, {CPU: "-1"}} {
		if err := flags.Validate(); err == nil {
			t.Errorf("-mem %q -cpu %q accepted", flags.Mem, flags.CPU)
		}
	}
}

// On the engine: a container whose client names no zone runs in the hub's,
// with Selenoid's /dev/shm.
func TestDockerContainerTimeZoneAndShm(t *testing.T) {
	l, _ := newLauncher(t, Options{Options: launcher.Options{TimeZone: "America/Sao_Paulo"}}, nil)
	inst, err := l.Start(context.Background(), stubRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop(context.Background())
	if _, env := launchertest.DriverStatus(t, inst); env["TZ"] != "America/Sao_Paulo" {
		t.Errorf("TZ=%q in the driver, want the hub's America/Sao_Paulo", env["TZ"])
	}
	info, err := engine.ContainerInspect(context.Background(), inst.(*instance).id)
	if err != nil {
		t.Fatal(err)
	}
	if info.HostConfig.ShmSize != 256<<20 {
		t.Errorf("the container has %d bytes of /dev/shm, want Selenoid's 256 MiB", info.HostConfig.ShmSize)
	}
}

// A client's hostsEntries come before browsers.json's "hosts", as under
// Selenoid: /etc/hosts answers with the first line for a name, so the
// client decides, in its own container, where a name points.
func TestClientHostsEntriesComeFirst(t *testing.T) {
	l := &Launcher{opts: Options{Address: Published}}
	r := launcher.Request{ID: "1", Browser: config.Resolved{Name: "chrome", Version: "1", Browser: &config.Browser{
		Image: config.Image{Name: "img"}, Hosts: []string{"api:10.0.0.1"}}},
		Options: webdriver.Options{HostsEntries: []string{"api:10.0.0.2"}}}
	_, host, err := l.containerConfig(r, "1-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"api:10.0.0.2", "api:10.0.0.1"}; strings.Join(host.ExtraHosts, " ") != strings.Join(want, " ") {
		t.Errorf("extra hosts %q, want %q", host.ExtraHosts, want)
	}
}
