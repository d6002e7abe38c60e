package process

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// A session's download directory that its session left empty is renamed and
// given to a later session, empty and private; one with a file in it, or
// whose mode was changed, is removed instead. Close removes what was kept.
func TestDownloadDirsReusedOnlyEmptyAndPrivate(t *testing.T) {
	l := newLauncher(t, Options{DownloadDir: t.TempDir()})
	start := func() *instance {
		t.Helper()
		inst, err := l.Start(context.Background(), req())
		if err != nil {
			t.Fatal(err)
		}
		return inst.(*instance)
	}
	stop := func(i *instance) {
		t.Helper()
		if err := i.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(dir string) {
		t.Helper()
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s is still there after its session (%v)", dir, err)
		}
	}

	a := start()
	stop(a)
	gone(a.downloads) // renamed: a late request for a's files finds nothing
	if len(l.spare) != 1 {
		t.Fatalf("%d directories kept, want a's", len(l.spare))
	}
	kept := l.spare[0]
	b := start()
	if b.downloads != kept {
		t.Fatalf("b got %s, not the kept %s", b.downloads, kept)
	}
	if fi, err := os.Stat(b.downloads); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("b's directory: %v %v", fi, err)
	}

	// A directory its session spoiled goes, and is not kept: b's holds a
	// download, c's was opened up to others.
	spoilers := []struct {
		what  string
		spoil func(dir string) error
	}{
		{"holding a file", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "report.txt"), []byte("mine"), 0o600)
		}},
		{"of mode 0755", func(dir string) error { return os.Chmod(dir, 0o755) }},
	}
	for i, s := range spoilers {
		x := b
		if i > 0 {
			x = start()
		}
		if err := s.spoil(x.downloads); err != nil {
			t.Fatal(err)
		}
		stop(x)
		gone(x.downloads)
		if len(l.spare) != 0 {
			t.Fatalf("a directory %s was kept: %v", s.what, l.spare)
		}
	}

	d := start()
	stop(d)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(l.downloadRoot())
	if len(left) != 0 || len(l.spare) != 0 {
		t.Fatalf("after Close: %d entries under the download root, %d kept", len(left), len(l.spare))
	}
}

// At most maxSpareDirs empty directories are kept; the rest are removed.
func TestSpareDownloadDirsBounded(t *testing.T) {
	l := newLauncher(t, Options{DownloadDir: t.TempDir()})
	var dirs []string
	for i := range maxSpareDirs + 3 {
		dir, err := l.downloadDir([]byte{byte(i >> 8), byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	for _, dir := range dirs {
		if err := l.releaseDownloads(dir); err != nil {
			t.Fatal(err)
		}
	}
	left, _ := os.ReadDir(l.downloadRoot())
	if len(l.spare) != maxSpareDirs || len(left) != maxSpareDirs {
		t.Fatalf("%d kept, %d on disk; want %d of each", len(l.spare), len(left), maxSpareDirs)
	}
}
