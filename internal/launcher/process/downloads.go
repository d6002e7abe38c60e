package process

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Each session gets a download directory of its own. Creating and removing
// a directory are journaled metadata writes, a large part of the hub's CPU
// per session under churn, and the removal ran while the session's slot was
// still held. A directory its session left empty is instead renamed and kept for a
// later session: checking that it is empty is a read, and the rename means
// a request for the ended session's files still in flight finds nothing there
// rather than the next session's.

// maxSpareDirs bounds the empty download directories kept for reuse.
const maxSpareDirs = 64

// downloadDir is a new session's download directory: an empty one an ended
// session left, or a new one named by token.
func (l *Launcher) downloadDir(token []byte) (string, error) {
	l.mu.Lock()
	if n := len(l.spare); n > 0 {
		dir := l.spare[n-1]
		l.spare = l.spare[:n-1]
		l.mu.Unlock()
		return dir, nil
	}
	l.mu.Unlock()
	dir := filepath.Join(l.downloadRoot(), hex.EncodeToString(token))
	return dir, os.MkdirAll(dir, 0o700)
}

// releaseDownloads gives back an ended session's download directory, once
// every process of the session is gone: renamed and kept for reuse when it is
// still the hub's own empty, private directory, else removed with what it
// holds.
func (l *Launcher) releaseDownloads(dir string) error {
	l.mu.Lock()
	room := len(l.spare) < maxSpareDirs
	l.mu.Unlock()
	if room && reusable(dir) {
		token := make([]byte, 8)
		_, _ = rand.Read(token)
		renamed := filepath.Join(filepath.Dir(dir), hex.EncodeToString(token))
		if os.Rename(dir, renamed) == nil {
			l.mu.Lock()
			if len(l.spare) < maxSpareDirs {
				l.spare = append(l.spare, renamed)
				l.mu.Unlock()
				return nil
			}
			l.mu.Unlock() // filled meanwhile by other releases
			dir = renamed
		}
	}
	return os.RemoveAll(dir)
}

// reusable reports whether dir is a directory (not a link to one), private to
// this process's user (mode 0700, as made), and empty.
func reusable(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return false
	}
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return err == io.EOF
}

// Close removes the download directories kept for reuse and closes the
// kernel-query socket. The hub calls it at shutdown, once its sessions have
// ended; a start after Close makes new ones.
func (l *Launcher) Close() error {
	_ = l.diag.Close()
	l.mu.Lock()
	spare := l.spare
	l.spare = nil
	l.mu.Unlock()
	var first error
	for _, dir := range spare {
		if err := os.RemoveAll(dir); err != nil && first == nil {
			first = err
		}
	}
	// The instance's directories go too once nothing is left in them (a
	// session still ending keeps its own until its Stop).
	_ = os.Remove(l.downloadRoot())
	_ = os.Remove(l.tempRoot())
	return first
}
