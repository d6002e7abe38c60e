package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// A "display" entry's driver runs under xvfb-run on a free display, its
// screen the session's screenResolution (depth 24 when none is given), or
// DefaultScreen.
func TestDisplayCommand(t *testing.T) {
	for asked, want := range map[string]string{"": "-screen 0 " + DefaultScreen, "1280x1024": "-screen 0 1280x1024x24", "800x600x16": "-screen 0 800x600x16"} {
		got := displayCommand(webdriver.Options{ScreenResolution: asked})
		if !slices.Equal(got, []string{"xvfb-run", "-a", "-s", want}) {
			t.Errorf("screen %q: %q", asked, got)
		}
	}
}

// A "display" session's end leaves no X display behind: xvfb-run does not
// wait for its Xvfb, which gets SIGTERM and the moment it takes to remove its
// /tmp/.X<n>-lock and socket, not SIGKILL, after which they stayed for good.
func TestDisplaySessionLeavesNoLock(t *testing.T) {
	if _, err := exec.LookPath("xvfb-run"); err != nil {
		// CI installs it (scripts/deps.sh test): a skip there would hide
		// that this check never ran.
		if os.Getenv("CI") != "" {
			t.Fatal("no xvfb-run in CI, where scripts/deps.sh test installs it:", err)
		}
		t.Skip("no xvfb-run (scripts/deps.sh test installs it):", err)
	}
	// Xvfb's own exit is waited for up to the stop timeout: a long one, so
	// that a loaded machine's slow exit is not taken for a lock left.
	l := newLauncher(t, Options{Options: launcher.Options{StopTimeout: time.Minute}})
	r := req()
	r.Browser.Browser.Display = true
	inst, err := l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	mine := func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) }
	var lock string
	for _, p := range MarkedPIDs(mine) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(comm)) != "Xvfb" {
			continue
		}
		locks, _ := filepath.Glob("/tmp/.X*-lock")
		for _, f := range locks {
			if b, _ := os.ReadFile(f); strings.TrimSpace(string(b)) == strconv.Itoa(p) {
				lock = f
			}
		}
	}
	if lock == "" {
		t.Fatal("no X display lock of the session's Xvfb")
	}
	socket := "/tmp/.X11-unix/X" + strings.TrimSuffix(strings.TrimPrefix(filepath.Base(lock), ".X"), "-lock")
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{lock, socket} {
		if _, err := os.Lstat(f); err == nil {
			os.Remove(f)
			t.Errorf("%s left after the session", f)
		}
	}
}
