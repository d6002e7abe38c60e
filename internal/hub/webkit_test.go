package hub

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// A WebKit session's upload is stored by the hub: its one file, by its base
// name, never a path of the client's choosing, and bounded.
func TestUploadedFile(t *testing.T) {
	b64 := func(files map[string][]byte) string { return base64.StdEncoding.EncodeToString(zipOf(t, files)) }
	name, data, err := uploadedFile(b64(map[string][]byte{"report.txt": []byte("hello")}), 1<<20)
	if err != nil || name != "report.txt" || string(data) != "hello" {
		t.Fatalf("one file: %q %q %v", name, data, err)
	}
	name, _, err = uploadedFile(b64(map[string][]byte{"../../etc/cron.d/x": []byte("x")}), 1<<20)
	if err != nil || name != "x" {
		t.Fatalf("a path in the zip: stored as %q (%v), want its base name alone", name, err)
	}
	for what, files := range map[string]map[string][]byte{
		"two files":  {"a": nil, "b": nil},
		"a dot file": {".bashrc": []byte("x")},
	} {
		if _, _, err := uploadedFile(b64(files), 1<<20); err == nil {
			t.Errorf("%s accepted", what)
		}
	}
	if _, _, err := uploadedFile(b64(map[string][]byte{"big": []byte(strings.Repeat("x", 2048))}), 1024); !errors.Is(err, errUploadTooLarge) {
		t.Errorf("a file over the limit: %v", err)
	}
	if _, _, err := uploadedFile("not base64!", 1024); err == nil {
		t.Error("not base64 accepted")
	}
}
