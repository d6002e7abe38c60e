package process

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// spawner starts drivers from a thread of this process with a descriptor table
// of its own. A fork copies the forking thread's table and the exec closes it
// again in the child, so a hub holding thousands of waiting clients'
// connections paid for each of them at every driver start
// (BenchmarkExecWithOpenDescriptors), and the hand-off to a waiter slowed with
// the queue's length. This thread's
// table is a copy of the hub's when the launcher was made, less every file and
// socket in it: what a fork from here copies stays a handful of descriptors,
// however many connections the hub holds.
//
// The thread lives as long as the launcher: a driver's parent is this thread,
// and a driver gets SIGKILL (Pdeathsig) when its parent thread ends.
//
// While the hub's own table is small the hand-off to that thread costs more
// than the copy it saves, and fork starts the driver from the calling thread
// instead (see fork).
type spawner struct {
	reqs chan *spawnReq
	once sync.Once // stop runs from its caller and again from the launcher's cleanup

	// directMax is the largest table of the hub's (FDSize) that fork forks
	// from directly; big is set once the table has been larger, which it
	// then stays (the kernel never shrinks a descriptor table), or when the
	// inherited descriptors could not be marked close-on-exec.
	directMax int
	big       atomic.Bool
	// null is /dev/null in the hub's table, a direct fork's standard input.
	null int
	tid  int // the thread's, for tests: its children are /proc/self/task/tid/children
}

// spawnReq is one driver start, answered by closing done.
type spawnReq struct {
	path      string
	argv, env []string
	dir       string              // the driver's working directory; "": the hub's
	out       int                 // the output pipe's write end, in the hub's table
	cred      *syscall.Credential // the user the driver runs as; nil: the hub's
	pid       int
	err       error
	done      chan struct{}
	probe     *syscall.Stat_t // set: copy out in and fstat it, start nothing
}

// System calls Go's syscall package has no wrapper for; numbers shared by
// every Linux architecture since 5.x.
const (
	sysPidfdOpen   = 434
	sysCloseRange  = 436
	sysPidfdGetfd  = 438
	closeRangeExec = 1 << 2 // CLOSE_RANGE_CLOEXEC
)

// closeOnExecInherited marks every descriptor above the standard streams
// close-on-exec: Go opens its own so, but one the hub inherited from whatever
// started it (a CI runner's pipe, a shell's descriptor) would otherwise pass
// to every driver a direct fork starts. Linux 5.11 and later.
func closeOnExecInherited() error {
	if _, _, errno := syscall.Syscall(sysCloseRange, 3, math.MaxUint32, closeRangeExec); errno != 0 {
		return fmt.Errorf("close_range(CLOSE_RANGE_CLOEXEC): %w", errno)
	}
	return nil
}

// newSpawner starts the spawner's thread; an error says why it could not (an
// old kernel, a seccomp profile refusing unshare), and the launcher then forks
// from whichever thread starts a driver, as before.
func newSpawner() (*spawner, error) {
	null, err := syscall.Open(os.DevNull, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	s := &spawner{reqs: make(chan *spawnReq), directMax: directForkTable, null: null}
	if err := closeOnExecInherited(); err != nil {
		s.big.Store(true) // a direct fork could pass the inherited ones on: never fork directly
	}
	ready := make(chan error, 1)
	go s.run(ready, nil)
	if err := <-ready; err != nil {
		syscall.Close(null)
		return nil, err
	}
	// The first driver must not be the one to find that a descriptor of the
	// hub's cannot be copied in: copy one now and check it is the same file.
	pr, pw, err := os.Pipe()
	if err != nil {
		s.stop()
		return nil, err
	}
	defer pr.Close()
	defer pw.Close()
	var want, got syscall.Stat_t
	if err := syscall.Fstat(int(pw.Fd()), &want); err != nil {
		s.stop()
		return nil, err
	}
	_, err = s.start(&spawnReq{out: int(pw.Fd()), probe: &got})
	if err == nil && (got.Ino != want.Ino || got.Dev != want.Dev) {
		err = errors.New("pidfd_getfd copied another file than the one asked for")
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// stop ends the spawner's thread; drivers it started and that still run get
// SIGKILL from the kernel. Drivers fork started from the hub's own threads
// get it when the hub exits.
func (s *spawner) stop() {
	s.once.Do(func() {
		close(s.reqs)
		syscall.Close(s.null)
	})
}

func (s *spawner) run(ready chan<- error, started chan<- struct{}) {
	// Never unlocked: when this goroutine returns the runtime ends the thread,
	// and its private table with it, rather than run other goroutines on it.
	// The runtime starts new threads from a template thread, never from a
	// locked one, so no other thread inherits this table.
	runtime.LockOSThread()
	if syscall.Gettid() == os.Getpid() {
		// The main thread keeps the table the rest of the process shares:
		// pidfd_getfd copies descriptors from the main thread's. Held here
		// until another goroutine has a thread of its own, so that it
		// cannot land on this one too.
		elsewhere := make(chan struct{})
		go s.run(ready, elsewhere)
		<-elsewhere
		runtime.UnlockOSThread()
		return
	}
	if started != nil {
		close(started)
	}
	self, devnull, err := privateTable()
	if err != nil {
		ready <- err
		return
	}
	s.tid = syscall.Gettid()
	ready <- nil
	for r := range s.reqs {
		r.pid, r.err = spawnFrom(self, devnull, r)
		close(r.done)
	}
}

// privateTable gives the calling (locked) thread a descriptor table of its own
// and empties it of everything but the standard streams and the Go runtime's
// own descriptors (its epoll instance and the eventfd that wakes it, which the
// runtime may use from any thread: closing them here would crash it). It
// returns a pidfd of this process, to copy descriptors in from the hub's table,
// and /dev/null for the drivers' standard input.
func privateTable() (self, devnull int, err error) {
	if err := syscall.Unshare(syscall.CLONE_FILES); err != nil {
		return -1, -1, fmt.Errorf("unshare(CLONE_FILES): %w", err)
	}
	dir, err := os.Open("/proc/thread-self/fd")
	if err != nil {
		return -1, -1, err
	}
	names, err := dir.Readdirnames(-1)
	dirFd := int(dir.Fd())
	if err != nil {
		dir.Close()
		return -1, -1, err
	}
	var drop []int
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd <= 2 || fd == dirFd {
			continue
		}
		target, err := os.Readlink("/proc/thread-self/fd/" + name)
		if err != nil || strings.HasPrefix(target, "anon_inode:") {
			continue
		}
		drop = append(drop, fd) // a file, pipe or socket of the hub's
	}
	dir.Close()
	for _, fd := range drop {
		syscall.Close(fd)
	}
	r, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(os.Getpid()), 0, 0)
	if errno != 0 {
		return -1, -1, fmt.Errorf("pidfd_open: %w", errno)
	}
	self = int(r)
	devnull, err = syscall.Open(os.DevNull, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Close(self)
		return -1, -1, err
	}
	return self, devnull, nil
}

// getfd copies descriptor fd of the process's main table (its main thread's)
// into the calling thread's, close-on-exec.
func getfd(self, fd int) (int, error) {
	for {
		r, _, errno := syscall.Syscall(sysPidfdGetfd, uintptr(self), uintptr(fd), 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return -1, fmt.Errorf("pidfd_getfd: %w", errno)
		}
		return int(r), nil
	}
}

func spawnFrom(self, devnull int, r *spawnReq) (int, error) {
	out, err := getfd(self, r.out)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(out)
	if r.probe != nil {
		return 0, syscall.Fstat(out, r.probe)
	}
	return forkExec(r, devnull, out)
}

// forkExec starts a driver in its own process group (Stop reaches the browser
// too), killed if its parent thread ends, its output to out.
func forkExec(r *spawnReq, stdin, out int) (int, error) {
	return syscall.ForkExec(r.path, r.argv, &syscall.ProcAttr{
		Dir:   r.dir,
		Env:   lastOfEachName(r.env),
		Files: []uintptr{uintptr(stdin), uintptr(out), uintptr(out)},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: r.cred},
	})
}

// directForkTable is the descriptor table (FDSize) up to which fork forks
// from the calling thread: below it a fork's copy of the table
// (BenchmarkExecWithOpenDescriptors) costs less than the two hand-offs to
// the spawner's thread and back, which under churn wait for each other's CPU.
const directForkTable = 1024

// fork starts r the cheaper way for the hub's table now: from the calling
// thread while it is small, from the spawner's thread once it is not (a hub
// holding thousands of connections, for good: the table never shrinks).
func (s *spawner) fork(r *spawnReq) (int, error) {
	if s == nil {
		return s.start(r)
	}
	if !s.big.Load() {
		if tableSize() <= s.directMax {
			return forkExec(r, s.null, r.out)
		}
		s.big.Store(true)
	}
	return s.start(r)
}

// tableSize is the size of the process's descriptor table (FDSize in
// /proc/self/status: what a fork copies at most), or MaxInt when it cannot
// be read: one read of a small file.
func tableSize() int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return math.MaxInt
	}
	_, rest, ok := bytes.Cut(data, []byte("\nFDSize:"))
	if !ok {
		return math.MaxInt
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	size, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil || size < 0 {
		return math.MaxInt
	}
	return size
}

// start runs r from the spawner's thread, or from this one without a spawner.
func (s *spawner) start(r *spawnReq) (int, error) {
	if s == nil {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return 0, err
		}
		defer devnull.Close()
		return forkExec(r, int(devnull.Fd()), r.out)
	}
	r.done = make(chan struct{})
	s.reqs <- r
	<-r.done
	return r.pid, r.err
}

// waitPid waits for a driver to exit and says how, as os/exec would ("exit
// status 1", "signal: killed"). It waits on the driver's pidfd in Go's poller
// rather than in wait4: a blocked wait4 holds a thread for the driver's whole
// life (at -limit 10,000 more than Go's 10,000-thread limit), and, with one
// CPU for the hub (GOMAXPROCS=1), the hub's only one until the runtime notices.
func waitPid(pid int) string {
	var ws syscall.WaitStatus
	var err error
	if f := pidfd(pid); f != nil {
		defer f.Close()
		var rc syscall.RawConn
		if rc, err = f.SyscallConn(); err == nil {
			rerr := rc.Read(func(uintptr) bool {
				var got int
				got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				return got != 0 || (err != nil && !errors.Is(err, syscall.EINTR))
			})
			if err == nil {
				err = rerr
			}
		}
	} else {
		for {
			_, err = syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
	}
	if err != nil {
		return "wait: " + err.Error()
	}
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		s := "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return "wait status " + strconv.Itoa(int(ws))
}

// pidfd is a pollable pidfd of a child that has not been reaped (so its pid
// is still its own), readable once it exits; nil if the kernel has none.
func pidfd(pid int) *os.File {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), syscall.O_NONBLOCK, 0) // PIDFD_NONBLOCK
	if errno != 0 {
		return nil
	}
	return os.NewFile(fd, "pidfd "+strconv.Itoa(pid))
}

// lastOfEachName keeps, of variables set more than once, the last setting, as
// os/exec does: the session's environment is appended to the hub's, and a
// program's getenv would find the first.
func lastOfEachName(env []string) []string {
	seen := make(map[string]bool, len(env))
	out := make([]string, len(env))
	n := len(env)
	for i := len(env) - 1; i >= 0; i-- {
		name, _, _ := strings.Cut(env[i], "=")
		if seen[name] {
			continue
		}
		seen[name] = true
		n--
		out[n] = env[i]
	}
	return out[n:]
}
