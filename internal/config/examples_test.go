package config

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The shipped example files load, and the Docker example names the tag that
// images/chromium/build.sh gives the image it builds (a hash of the script), so
// the example cannot silently go stale.
func TestShippedExamples(t *testing.T) {
	for _, name := range []string{"browsers.local.json", "browsers.docker.json"} {
		data, err := os.ReadFile(filepath.Join("../../config", name))
		if err != nil {
			t.Fatal(err)
		}
		bs, err := Parse(data, true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name != "browsers.docker.json" {
			continue
		}
		var list string
		// As build.sh hashes them, named as sha256sum prints them from images/chromium.
		for _, f := range []string{"build.sh", "entrypoint.sh", "../debian-root.sh", "../../cmd/fileserver/main.go"} {
			b, err := os.ReadFile(filepath.Join("../../images/chromium", f))
			if err != nil {
				t.Fatal(err)
			}
			list += fmt.Sprintf("%x  %s\n", sha256.Sum256(b), f)
		}
		want := fmt.Sprintf("websummoner/chromium:bookworm-%x", sha256.Sum256([]byte(list)))[:len("websummoner/chromium:bookworm-")+12]
		if got := bs["chrome"].Versions["156.0"].Image.Name; got != want {
			t.Errorf("%s names %s; images/chromium/build.sh builds %s", name, got, want)
		}
	}
}
