package process

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/launcher/launchertest"
	"github.com/websummoner/websummoner/internal/logtest"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// A start the client leaves while the driver starts, and one whose session is
// never created, leave nothing in -log-output-dir: the temporary log went with
// them (issue 33).
func TestAbandonedStartLeavesNoLog(t *testing.T) {
	dir := t.TempDir()
	ev, log := logtest.New(100)
	l := closeAtEnd(t, New(Options{Options: launcher.Options{LogDir: dir, StartupTimeout: 10 * time.Second, StopTimeout: 2 * time.Second,
		Instance: instanceFor("test-" + t.Name())}}, log))
	r := req("-listen-delay", "1h")
	r.Options = webdriver.Options{EnableLog: true, LogName: "mine.log"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Start(ctx, r)
		done <- err
	}()
	ev.Wait(t, "PROCESS_STARTED", 10*time.Second) // the driver runs; its log file exists
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a start abandoned by its client left %v in -log-output-dir", entries)
	}

	// Started, but no session came of it (the driver refused, or the client
	// left during its POST /session): Stop without SessionCreated.
	r = req()
	r.Options = webdriver.Options{EnableLog: true}
	inst, err := l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("the running driver's log: %v", entries)
	}
	inst.Stop(context.Background())
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a start without a session left %v in -log-output-dir", entries)
	}
}

// A logName that exists in -log-output-dir (another user's log) is not
// replaced: this session's log gets its session id in its name, and a line
// says so (issue 33).
func TestLogNameNeverReplacesAFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine.log"), []byte("another user's log"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev, log := logtest.New(100)
	l := closeAtEnd(t, New(Options{Options: launcher.Options{LogDir: dir, StartupTimeout: 10 * time.Second, StopTimeout: 2 * time.Second,
		Instance: instanceFor("test-" + t.Name())}}, log))
	r := req()
	r.Options = webdriver.Options{EnableLog: true, LogName: "mine.log"}
	inst, err := l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	inst.SessionCreated("abc", nil)
	if line := ev.Wait(t, "LOG_RENAMED", 5*time.Second); !strings.Contains(line, "mine-abc.log") {
		t.Errorf("logged %q", line)
	}
	inst.Stop(context.Background())
	if data, _ := os.ReadFile(filepath.Join(dir, "mine.log")); string(data) != "another user's log" {
		t.Fatalf("the existing file now holds %q", data)
	}
	data, err := os.ReadFile(filepath.Join(dir, "mine-abc.log"))
	if err != nil || !strings.Contains(string(data), "wdstub: listening on") {
		t.Fatalf("this session's log %q: %v", data, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("files %v, want the two logs", entries)
	}
}

// A kept log that cannot be written (a full -log-output-dir) costs the
// session its log, not its driver: the copy of the driver's output stopped
// at the first failed write and closed the pipe, and the driver's next line
// killed it (SIGPIPE), so a full disk ended every local session and start.
// /dev/full put in the log file's place gives the write the disk's ENOSPC.
func TestFullLogDirKeepsTheDriver(t *testing.T) {
	dir := t.TempDir()
	ev, log := logtest.New(100)
	l := closeAtEnd(t, New(Options{Options: launcher.Options{LogDir: dir, StartupTimeout: 10 * time.Second, StopTimeout: 2 * time.Second,
		Instance: instanceFor("test-" + t.Name())}}, log))
	r := req("-log-requests") // a line of output per request
	r.Options = webdriver.Options{EnableLog: true}
	inst, err := l.Start(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop(context.Background())
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal("/dev/full, which every Linux has, cannot be opened:", err)
	}
	defer full.Close()
	if err := syscall.Dup2(int(full.Fd()), int(inst.(*instance).logFile.Fd())); err != nil {
		t.Fatal(err)
	}
	pid, _ := launchertest.DriverStatus(t, inst)
	for range 5 { // each a line the driver writes after the failure
		resp, err := http.Get(inst.Endpoints().Driver.JoinPath("status").String())
		if err != nil {
			break
		}
		resp.Body.Close()
	}
	if !alive(pid) {
		t.Fatal("the driver died when its log could not be written")
	}
	if line := ev.Wait(t, "LOG_FAILED", 10*time.Second); !strings.Contains(line, "no space left on device") {
		t.Errorf("logged %q", line)
	}
}
