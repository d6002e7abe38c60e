package config

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped example files load, and the Docker example names the tags that
// images/chromium/build.sh and images/webkit/build.sh give the images they
// build (a hash of their inputs), so the example cannot silently go stale.
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
		// As each build.sh hashes them, named as sha256sum prints them from its folder.
		for _, img := range []struct {
			dir, tag string
			entries  [][2]string
		}{
			{"chromium", "websummoner/chromium", [][2]string{{"chrome", "156.0"}}},
			{"webkit", "websummoner/webkit", [][2]string{{"MiniBrowser", "2.50"}, {"webkit", "2.50"}, {"webkitgtk", "2.50"}}},
		} {
			var list string
			for _, f := range []string{"build.sh", "entrypoint.sh", "../debian-root.sh", "../../cmd/fileserver/main.go"} {
				b, err := os.ReadFile(filepath.Join("../../images", img.dir, f))
				if err != nil {
					t.Fatal(err)
				}
				list += fmt.Sprintf("%x  %s\n", sha256.Sum256(b), f)
			}
			want := fmt.Sprintf("%s:bookworm-%x", img.tag, sha256.Sum256([]byte(list)))[:len(img.tag)+len(":bookworm-")+12]
			if img.dir == "chromium" {
				manifest, err := os.ReadFile("../../deploy/kubernetes/websummoner.yaml")
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(manifest), `"image": "`+want+`"`) {
					t.Errorf("deploy/kubernetes/websummoner.yaml's browsers.json does not name %s, which images/chromium/build.sh builds", want)
				}
			}
			for _, e := range img.entries {
				v := bs[e[0]]
				if v == nil || v.Versions[e[1]] == nil {
					t.Errorf("%s has no %s %s", name, e[0], e[1])
					continue
				}
				if got := v.Versions[e[1]].Image.Name; got != want {
					t.Errorf("%s: %s %s names %s; images/%s/build.sh builds %s", name, e[0], e[1], got, img.dir, want)
				}
			}
		}
	}
}
