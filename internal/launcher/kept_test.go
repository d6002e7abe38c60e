package launcher

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/websummoner/websummoner/internal/webdriver"
)

// A kept log or video never replaces a file already there (another user's, or
// anything else): it gets a name with the session id in it (issue 33).
func TestKeptFilesNeverReplaceOthers(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "run.log")
	if err := os.WriteFile(other, []byte("another user's log"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, name, err := CreateKept(dir, "run.log", "s1")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("mine")
	f.Close()
	if name != "run-s1.log" {
		t.Errorf("created as %q, want run-s1.log", name)
	}
	// The same name again, and the session id taken too: still a new file.
	f, name2, err := CreateKept(dir, "run.log", "s1")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if name2 == name || name2 == "run.log" || !strings.HasPrefix(name2, "run-s1-") || filepath.Ext(name2) != ".log" {
		t.Errorf("created again as %q", name2)
	}

	tmp := filepath.Join(dir, "driver-123.log")
	os.WriteFile(tmp, []byte("renamed"), 0o644)
	name3, err := RenameKept(tmp, dir, "run.log", "s2")
	if err != nil || name3 != "run-s2.log" {
		t.Fatalf("renamed as %q: %v", name3, err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the temporary name is still there: %v", err)
	}
	if data, _ := os.ReadFile(other); string(data) != "another user's log" {
		t.Fatalf("the existing file now holds %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, name3)); string(data) != "renamed" {
		t.Fatalf("the renamed file holds %q", data)
	}
	// A free name is used as asked.
	tmp = filepath.Join(dir, "driver-456.log")
	os.WriteFile(tmp, nil, 0o644)
	if n, err := RenameKept(tmp, dir, "free.log", "s3"); err != nil || n != "free.log" {
		t.Fatalf("a free name: %q %v", n, err)
	}
	// A long name with the session id in it is still a file name Linux takes.
	long := strings.Repeat("a", 250) + ".log"
	os.WriteFile(filepath.Join(dir, long), nil, 0o644)
	f, n, err := CreateKept(dir, long, "s4")
	if err != nil || len(n) > 255 {
		t.Fatalf("a long name: %q %v", n, err)
	}
	f.Close()
	// So is a name whose "extension" is most of it (videoName takes any
	// name), and one cut where a character is more than one byte.
	for _, long := range []string{"x." + strings.Repeat("e", 238), strings.Repeat("é", 120) + ".mp4"} {
		os.WriteFile(filepath.Join(dir, long), nil, 0o644)
		f, n, err := CreateKept(dir, long, "5f0c8a0e3b1d4c2a9e7f6b5a4c3d2e1f")
		if err != nil || len(n) > 255 || !utf8.ValidString(n) {
			t.Fatalf("a long name taken (%d bytes): %q %v", len(long), n, err)
		}
		f.Close()
	}
}

// A session id is the driver's; the file named after it stays in the directory.
func TestLogFileOfAHostileSessionID(t *testing.T) {
	for id, want := range map[string]string{
		"abc":         "abc.log",
		"../../etc/x": "_._.._etc_x.log",
		".hidden":     "_hidden.log",
		"a\nb":        "a_b.log",
		"":            "_.log",
	} {
		got := LogFile(webdriver.Options{}, id)
		if got != want || strings.ContainsAny(got, "/\\\n") || got[0] == '.' {
			t.Errorf("LogFile(%q) = %q, want %q", id, got, want)
		}
	}
	if got := LogFile(webdriver.Options{LogName: "mine.log"}, "abc"); got != "mine.log" {
		t.Errorf("logName: %q", got)
	}
}

// A kept log whose writing fails before its first byte (a full disk) leaves
// no empty file to be listed and served as the session's log; one that
// failed part-way keeps what it has.
func TestFailedKeptLogLeavesNoEmptyFile(t *testing.T) {
	dir := t.TempDir()
	o := Options{LogDir: dir}
	fail := errors.New("no space left on device (injected)")
	if err := o.WriteKeptLog(webdriver.Options{}, "empty", nil, "1", func(io.Writer) error { return fail }); !errors.Is(err, fail) {
		t.Fatalf("err = %v", err)
	}
	if err := o.WriteKeptLog(webdriver.Options{}, "part", nil, "2", func(w io.Writer) error {
		io.WriteString(w, "the start\n")
		return fail
	}); !errors.Is(err, fail) {
		t.Fatalf("err = %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "part.log" {
		t.Fatalf("left %v, want part.log alone", entries)
	}
}
