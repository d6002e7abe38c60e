// Package launchertest holds the start-policy cases every launcher must pass,
// so that the process and Docker launchers are held to one table.
package launchertest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// EnvCase is one start: the operator's browsers.json env, the client's options,
// and the value each named variable must have in the driver's environment ("" =
// not set).
type EnvCase struct {
	Name     string
	Operator []string // browsers.json "env"
	// ClientEnv is browsers.json "clientEnv": what the operator lets clients set.
	ClientEnv []string
	Options   webdriver.Options
	Want      map[string]string
}

// EnvCases is the env precedence of docs/browsers.md: client env, then what the
// hub derives from the client's options, then the operator's env. In a
// container (the boundary, as under Selenoid) a client's variables all reach
// the driver but the hub's own; on the hub's host only the allow-list does.
func EnvCases(inContainer bool) []EnvCase {
	outside := map[string]string{"WS_FOO": "", "LD_PRELOAD": "", "PYTHONPATH": ""} // WEBSUMMONER_PROCESS is the launcher's own marker there
	if inContainer {
		outside = map[string]string{"WS_FOO": "1", "LD_PRELOAD": "/tmp/x.so", "PYTHONPATH": "/tmp", "WEBSUMMONER_PROCESS": ""}
	}
	return []EnvCase{
		{Name: "client env the operator allows reaches the driver",
			ClientEnv: []string{"WS_*"},
			Options:   webdriver.Options{Env: []string{"WS_FOO=1", "LANG=C.UTF-8"}},
			Want:      map[string]string{"WS_FOO": "1", "LANG": "C.UTF-8"}},
		{Name: "client env outside the allow-list (a local driver's) reaches a container's driver alone",
			ClientEnv: []string{"LD_PRELOAD", "PYTHONPATH"},
			Options:   webdriver.Options{Env: []string{"WS_FOO=1", "LD_PRELOAD=/tmp/x.so", "PYTHONPATH=/tmp", "WEBSUMMONER_PROCESS=x"}},
			Want:      outside},
		{Name: "derived values beat the client's env",
			Options: webdriver.Options{Env: []string{"TZ=Asia/Tokyo", "SCREEN_RESOLUTION=1x1x8"}, TimeZone: "Europe/Paris", ScreenResolution: "1280x1024x24", EnableVNC: true},
			Want:    map[string]string{"TZ": "Europe/Paris", "SCREEN_RESOLUTION": "1280x1024x24", "ENABLE_VNC": "true"}},
		{Name: "a screen without its depth reaches the browser with depth 24, as Selenoid sends it",
			Options: webdriver.Options{ScreenResolution: "1280x1024"},
			Want:    map[string]string{"SCREEN_RESOLUTION": "1280x1024x24"}},
		{Name: "the operator's env beats the client's",
			Operator:  []string{"LANG=C", "TZ=UTC"},
			ClientEnv: []string{"WS_BAR"},
			Options:   webdriver.Options{Env: []string{"LANG=de_DE.UTF-8", "WS_BAR=x"}, TimeZone: "Europe/Paris"},
			Want:      map[string]string{"LANG": "C", "TZ": "UTC", "WS_BAR": "x"}},
		{Name: "nothing asked, nothing set",
			Want: map[string]string{"ENABLE_VNC": "", "SCREEN_RESOLUTION": ""}},
	}
}

// DriverStatus reads what a started wdstub driver reports on /status: its pid
// and the environment it was really given.
func DriverStatus(t testing.TB, inst launcher.Instance) (pid int, env map[string]string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: time.Minute}).Get(inst.Endpoints().Driver.JoinPath("status").String()) // a hang fails
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Value struct {
			PID int      `json:"pid"`
			Env []string `json:"env"`
		} `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	env = map[string]string{}
	for _, kv := range st.Value.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return st.Value.PID, env
}

// RunEnvCases starts one driver per case with start (which sets the case's
// browsers.json env and clientEnv and the client's options), checks the
// environment it reports, and stops it.
func RunEnvCases(t *testing.T, inContainer bool, start func(c EnvCase) (launcher.Instance, error)) {
	t.Helper()
	for _, c := range EnvCases(inContainer) {
		inst, err := start(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		_, env := DriverStatus(t, inst)
		for k, want := range c.Want {
			if got := env[k]; got != want {
				t.Errorf("%s: %s=%q in the driver, want %q", c.Name, k, got, want)
			}
		}
		if err := inst.Stop(context.Background()); err != nil {
			t.Errorf("%s: stop: %v", c.Name, err)
		}
	}
}
