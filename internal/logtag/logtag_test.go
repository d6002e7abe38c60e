package logtag

import (
	"errors"
	"strings"
	"testing"
)

// A client-supplied value cannot forge a log line: control characters are
// escaped wherever they stand.
func TestFormatEscapesControlCharacters(t *testing.T) {
	got := Format("7\n", "NEW_REQUEST", "x\n2026/11/30 03:00:00 [-] [CONFIG_RELOADED] [evil]", errors.New("a\rb"), 42, "tab\there é")
	if strings.ContainsAny(got, "\n\r\t") {
		t.Fatalf("raw control character in %q", got)
	}
	want := `[7\n] [NEW_REQUEST] [x\n2026/11/30 03:00:00 [-] [CONFIG_RELOADED] [evil]] [a\rb] [42] [tab\there é]`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if Format("", "INIT") != "[-] [INIT]" {
		t.Fatal("empty id")
	}
}
