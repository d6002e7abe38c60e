package process

import (
	"slices"
	"testing"

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
