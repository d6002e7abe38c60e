package process

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// becomeSubreaper makes this process the parent of its drivers' orphans: a
// browser helper whose parent exits (Chromium's crash handler, which also
// leaves the process group with setsid) is reparented here rather than to
// init, so a session's processes are found among this process's own children,
// never by scanning the machine.
func becomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}

// childrenOf lists pid's children, from /proc/<pid>/task/*/children: a read per
// thread of pid, whatever else runs on the machine.
func childrenOf(pid int) []int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// procStat is what the hub reads of a process's /proc/<pid>/stat.
type procStat struct {
	state      byte
	pgid, sess int
}

func statOf(pid int) (procStat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(data[i+1:])) // state ppid pgrp session …
	if len(f) < 4 {
		return procStat{}, false
	}
	pgid, _ := strconv.Atoi(f[2])
	sess, _ := strconv.Atoi(f[3])
	return procStat{state: f[0][0], pgid: pgid, sess: sess}, true
}

// markerOf is the MarkerEnv value in a live process's environment.
func markerOf(pid int) string {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	key := []byte(MarkerEnv + "=")
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, key); ok {
			return string(v)
		}
	}
	return ""
}

// sessionProcs finds a session's processes without looking at any other: the
// driver's process tree, and among this process's children (where orphans land,
// it being their subreaper) those of the driver's group or carrying the
// session's marker, with their trees. Zombies are listed: they are reaped.
func sessionProcs(driver int, marker string) []int {
	seen := map[int]bool{}
	var out []int
	var walk func(pid int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		for _, c := range childrenOf(pid) {
			walk(c)
		}
	}
	if _, ok := statOf(driver); ok {
		walk(driver)
	}
	for _, c := range childrenOf(os.Getpid()) {
		if c == driver || seen[c] {
			continue
		}
		st, ok := statOf(c)
		if !ok {
			continue
		}
		if st.pgid == driver || (st.state != 'Z' && markerOf(c) == marker) {
			walk(c)
		}
	}
	return out
}

// killAll SIGKILLs procs, reaps those that are this process's children, and
// waits, for a bounded time, until every one is gone. It returns how many
// survived.
func killAll(procs []int, driver int) int {
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	left := procs
	for {
		var next []int
		for _, pid := range left {
			if pid == driver {
				continue // os/exec reaps the driver itself
			}
			var ws syscall.WaitStatus
			if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid || errors.Is(err, syscall.ECHILD) {
				// Reaped, or not our child: then gone when /proc says so.
				if got == pid {
					continue
				}
				if st, ok := statOf(pid); !ok || st.state == 'Z' {
					continue
				}
			}
			next = append(next, pid)
		}
		if len(next) == 0 || time.Now().After(deadline) {
			return len(next)
		}
		left = next
		time.Sleep(5 * time.Millisecond) // the kernel tears a killed process down in moments
	}
}
