package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// userHZ is the unit of /proc/PID/stat's CPU times (clock ticks a second;
// 100 on every Linux port Go supports).
const userHZ = 100

// statFields are /proc/PID/stat's fields after the command's name, from the
// process's state (the third field) on. The name, in parentheses, may hold
// spaces and parentheses itself, so the fields start after its last ')'.
func statFields(stat string) ([]string, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 > len(stat) {
		return nil, fmt.Errorf("/proc stat line %.80q has no \"(comm) \"", stat)
	}
	return strings.Fields(stat[i+2:]), nil
}

// parseStatCPU is the process's own user and system CPU time in seconds
// (utime and stime, fields 14 and 15 of /proc/PID/stat): every thread's, the
// exited ones' included, and none of its children's.
func parseStatCPU(stat string) (float64, error) {
	f, err := statFields(stat)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat line %.80q: %d fields after the name, want at least 13", stat, len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat line %.80q: utime %q, stime %q are not tick counts", stat, f[11], f[12])
	}
	return float64(u+s) / userHZ, nil
}

// ownCPU reads parseStatCPU of a process.
func ownCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading its /proc stat (has it exited?): %w", err)
	}
	return parseStatCPU(string(b))
}

// threadStat is what the scheduler counted of a thread, exactly rather than
// in ticks: the time it has run (ns), and how many times it was put on a CPU
// (each a wake-up or a preemption's return: a thread's cost beyond its work).
type threadStat struct{ run, runs uint64 }

// parseSchedstat reads /proc/PID/task/TID/schedstat: the run time (ns), the
// time spent waiting to run, and the count of times the thread was run.
func parseSchedstat(s string) (threadStat, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return threadStat{}, fmt.Errorf("schedstat %.80q: want three fields", s)
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return threadStat{}, fmt.Errorf("schedstat %.80q: run time %q is not a count of ns", s, f[0])
	}
	n, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return threadStat{}, fmt.Errorf("schedstat %.80q: runs %q is not a count", s, f[2])
	}
	return threadStat{run: v, runs: n}, nil
}

// threadsRuntime is each thread's schedstat of a process, by thread id.
func threadsRuntime(pid int) (map[int]threadStat, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no /proc/%d/task/*/schedstat (has it exited, or has the kernel no schedstats?)", pid)
	}
	out := map[int]threadStat{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended since the listing
		}
		v, err := parseSchedstat(string(b))
		if err != nil {
			return nil, err
		}
		tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		out[tid] = v
	}
	return out, nil
}

// runtimeSince is the run time and runs the threads in after gained since
// before: a thread new since then counts from zero. A thread that ended in
// between is missing from after and its last run is lost, so this
// undercounts by that much (a Go process ends threads rarely).
func runtimeSince(before, after map[int]threadStat) threadStat {
	var t threadStat
	for tid, a := range after {
		b := before[tid]
		if a.run < b.run || a.runs < b.runs { // the id was reused by a new thread
			b = threadStat{}
		}
		t.run += a.run - b.run
		t.runs += a.runs - b.runs
	}
	return t
}

// Linux's prctl options for a child subreaper.
const (
	prSetChildSubreaper = 36
	prGetChildSubreaper = 37
)

// adoptOrphans makes the tool its descendants' subreaper: a process whose
// parent ends (Chromium's helpers, a driver its Selenoid left) becomes the
// tool's child rather than init's, so endOrphans finds it. stop puts the
// setting back as it was.
func adoptOrphans() (stop func(), err error) {
	var was int32
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prGetChildSubreaper, uintptr(unsafe.Pointer(&was)), 0); e != 0 {
		return nil, fmt.Errorf("prctl(PR_GET_CHILD_SUBREAPER): %v", e)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return nil, fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %v", e)
	}
	return func() {
		if was == 0 {
			syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)
		}
	}, nil
}

// ownChildren are the tool's child processes now, of whichever thread.
func ownChildren() []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", os.Getpid()))
	var pids []int
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// endOrphans kills and reaps the tool's children that nothing of the tool
// waits for: the processes it adopted (adoptOrphans). Call it once every
// process the tool started itself has been stopped and waited for, as any
// child left then is an orphan. Killing one hands its own children to the
// tool in turn, so it goes on until none is left or grace has passed, and
// returns how many were left.
func endOrphans(grace time.Duration) int {
	deadline := time.Now().Add(grace)
	for {
		kids := ownChildren()
		if len(kids) == 0 || time.Now().After(deadline) {
			return len(kids)
		}
		for _, pid := range kids {
			syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			for {
				if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
					break
				}
			}
		}
	}
}
