package process

import (
	"bufio"
	"errors"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The spawner's thread must not keep the hub's files and sockets open: a
// listener the hub had when the launcher was made is really closed when the
// hub closes it (its port is free again), and a driver starts with its
// standard streams only.
func TestSpawnerHoldsNoneOfTheHubsFiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	s, err := newSpawner()
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	ln.Close()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after the hub closed its listener: the spawner's table holds it", addr)
	}
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the closed listener's port cannot be bound again: %v", err)
	}
	defer ln2.Close()

	pid, out := startSettled(t, s.start)
	checkDriverProcess(t, pid, out)
}

// A driver's parent is the spawner's thread: the thread ends only with its
// launcher, and drivers it leaves behind then die with it (Pdeathsig) rather
// than outlive the hub.
func TestSpawnerStopKillsItsDrivers(t *testing.T) {
	s, err := newSpawner()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := s.start(&spawnReq{path: "/bin/sleep", argv: []string{"sleep", "30"}, out: 2})
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	if why := waitPid(pid); why != "signal: killed" {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("a driver of a stopped spawner ended with %q, want signal: killed", why)
	}
}

// Without a spawner (the kernel or a seccomp profile refused one), drivers are
// forked from the starting thread, with the same result.
func TestStartWithoutSpawner(t *testing.T) {
	var s *spawner
	pid, err := s.start(&spawnReq{path: "/bin/sh", argv: []string{"sh", "-c", "exit 3"}, out: 2})
	if err != nil {
		t.Fatal(err)
	}
	if why := waitPid(pid); why != "exit status 3" {
		t.Fatalf("ended with %q, want exit status 3", why)
	}
	_, err = s.start(&spawnReq{path: "/nonexistent/driver", argv: []string{"driver"}, out: 2})
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("starting a missing program: %v, want ENOENT", err)
	}
}

func TestLastOfEachName(t *testing.T) {
	got := lastOfEachName([]string{"A=1", "B=2", "A=3", "C", "B=", "D=4"})
	want := []string{"A=3", "C", "B=", "D=4"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Waiting for a driver holds no thread: 100 live drivers waited on add a few
// threads to the hub, not 100 (at -limit 10,000 a thread each would pass Go's
// limit of 10,000), and each exit is still reported with its cause.
func TestWaitHoldsNoThread(t *testing.T) {
	s, err := newSpawner()
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	const n = 100
	before := threads(t)
	var pids []int
	reasons := make(chan string, n)
	for range n {
		pid, err := s.start(&spawnReq{path: "/bin/sleep", argv: []string{"sleep", "30"}, out: 2})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
		go func() { reasons <- waitPid(pid) }()
	}
	// Nothing marks a goroutine as blocked in a system call: give the 100
	// waiters a moment to get there (a blocking wait would show by then; the
	// check fails with one, verified by disabling the pidfd).
	time.Sleep(200 * time.Millisecond)
	during := threads(t)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for range n {
		if why := <-reasons; why != "signal: killed" {
			t.Errorf("a killed driver ended with %q", why)
		}
	}
	if during-before > 20 {
		t.Fatalf("waiting for %d drivers took %d threads (%d before, %d during)", n, during-before, before, during)
	}
}

func threads(t *testing.T) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads: in /proc/self/status")
	return 0
}

// While the hub's table is small, fork starts a driver from the calling
// thread, not the spawner's, with the same result: its standard streams
// only (none the hub inherited either), its output where asked, a process
// group of its own.
func TestForkDirectWhileTheTableIsSmall(t *testing.T) {
	// A descriptor as the hub may inherit one from what started it: not
	// close-on-exec (dup's copy never is).
	inherited, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(inherited)
	s, err := newSpawner()
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	s.directMax = math.MaxInt
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a socket of the hub's the driver must not get
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, out := startSettled(t, s.fork)
	if slices.Contains(spawnerChildren(t, s), pid) {
		t.Fatalf("driver %d was forked by the spawner's thread; with a small table it should come from the caller's", pid)
	}
	checkDriverProcess(t, pid, out)
	_, err = s.fork(&spawnReq{path: "/nonexistent/driver", argv: []string{"driver"}, out: 2})
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("starting a missing program: %v, want ENOENT", err)
	}
}

// Once the hub's table is large (thousands of waiting clients' connections),
// fork hands starts to the spawner's thread, and keeps doing so after the
// descriptors are closed: the table does not shrink.
func TestForkUsesTheSpawnerOnceTheTableIsLarge(t *testing.T) {
	s, err := newSpawner()
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	before := tableSize()
	if before == math.MaxInt {
		t.Fatal("tableSize cannot read FDSize from /proc/self/status")
	}
	var files []*os.File
	for len(files) < 2*directForkTable {
		r, w, err := os.Pipe()
		if err != nil {
			t.Skipf("%d descriptors: %v (the open-file limit)", len(files), err)
		}
		files = append(files, r, w)
	}
	if size := tableSize(); size < len(files) || size <= directForkTable {
		t.Fatalf("tableSize() = %d with %d descriptors open (before: %d)", size, len(files), before)
	}
	start := func() int {
		pid, err := s.fork(&spawnReq{path: "/bin/sleep", argv: []string{"sleep", "30"}, out: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL); waitPid(pid) })
		return pid
	}
	if pid := start(); !slices.Contains(spawnerChildren(t, s), pid) {
		t.Fatalf("with a table of %d, driver %d was not forked by the spawner's thread", tableSize(), pid)
	}
	for _, f := range files {
		f.Close()
	}
	if pid := start(); !slices.Contains(spawnerChildren(t, s), pid) {
		t.Fatalf("after the descriptors closed (the table still %d), driver %d was not forked by the spawner's thread", tableSize(), pid)
	}
	pid, out := startSettled(t, s.fork)
	if !slices.Contains(spawnerChildren(t, s), pid) {
		t.Fatalf("driver %d was not forked by the spawner's thread", pid)
	}
	checkDriverProcess(t, pid, out)
}

// startSettled starts a driver through start — a shell that says "ready" on
// its output and then waits for a sleep of its own — and returns once it has
// said so, with its output's /proc link (a pipe's). A process just exec'ed
// may still be in the dynamic loader, the C library open on descriptor 3 (a
// CI run caught /bin/sleep so): only one that has run its own code shows
// just the descriptors it was given.
func startSettled(t *testing.T, start func(*spawnReq) (int, error)) (pid int, out string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err = os.Readlink("/proc/self/fd/" + strconv.Itoa(int(w.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	pid, err = start(&spawnReq{path: "/bin/sh", argv: []string{"sh", "-c", "echo ready; sleep 30"}, out: int(w.Fd())})
	w.Close() // the driver has its own copy: a driver that dies ends the read below
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL); waitPid(pid) })
	r.SetReadDeadline(time.Now().Add(time.Minute)) // a driver that says nothing fails
	if line, err := bufio.NewReader(r).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the driver said %q, %v; want ready", line, err)
	}
	return pid, out
}

// checkDriverProcess checks what every driver start gives the driver: its
// standard streams only — input /dev/null, output and errors to out — and a
// process group of its own.
func checkDriverProcess(t *testing.T, pid int, out string) {
	t.Helper()
	fd := func(n string) string {
		target, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + n)
		return target
	}
	if fds := descriptors(t, pid); !slices.Equal(fds, []string{"0", "1", "2"}) {
		var what []string
		for _, n := range fds {
			what = append(what, n+" → "+fd(n))
		}
		t.Fatalf("the driver has descriptors %v, want 0 1 2", what)
	}
	if fd("0") != os.DevNull || fd("1") != out || fd("2") != out {
		t.Fatalf("the driver's streams are %q, %q, %q; want %s, then %q twice", fd("0"), fd("1"), fd("2"), os.DevNull, out)
	}
	if pgid, _ := syscall.Getpgid(pid); pgid != pid {
		t.Fatalf("the driver's process group is %d, want its own (%d)", pgid, pid)
	}
}

// spawnerChildren are the processes the spawner's thread forked.
func spawnerChildren(t *testing.T, s *spawner) []int {
	data, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(s.tid) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

func descriptors(t *testing.T, pid int) []string {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		fds = append(fds, e.Name())
	}
	return fds
}
