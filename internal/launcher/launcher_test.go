package launcher

import (
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// One precedence for every launcher: client env < derived < operator env, each
// name once.
func TestEnv(t *testing.T) {
	r := Request{Browser: config.Resolved{Browser: &config.Browser{Env: []string{"LANG=C", "TZ=UTC"}}},
		Options: webdriver.Options{Env: []string{"TZ=Asia/Tokyo", "FOO=1", "LANG=de", "SCREEN_RESOLUTION=1x1x1"},
			TimeZone: "Europe/Paris", ScreenResolution: "1280x1024x24", EnableVNC: true}}
	got := strings.Join(Env(r), " ")
	if want := "TZ=UTC FOO=1 LANG=C SCREEN_RESOLUTION=1280x1024x24 ENABLE_VNC=true"; got != want {
		t.Fatalf("env %q, want %q", got, want)
	}
	if env := Env(Request{Browser: config.Resolved{Browser: &config.Browser{}}}); len(env) != 0 {
		t.Fatalf("nothing asked: %v", env)
	}
}

// The zero Options work; negative values name their flag.
func TestOptionsDefaultsAndValidate(t *testing.T) {
	o := Options{}.WithDefaults()
	if o.StartupTimeout != 30*time.Second || o.StopTimeout != 30*time.Second || o.Instance != DefaultInstance {
		t.Fatalf("defaults %+v", o)
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("zero options refused: %v", err)
	}
	for _, c := range []struct {
		o    Options
		flag string
	}{
		{Options{StartupTimeout: -1}, "-service-startup-timeout"},
		{Options{StopTimeout: -1}, "-session-delete-timeout"},
		{Options{Instance: "a b"}, "-instance"},
	} {
		if err := c.o.Validate(); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s", c.o, err, c.flag)
		}
	}
}
