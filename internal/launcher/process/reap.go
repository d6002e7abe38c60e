package process

import (
	"bytes"
	"context"
	"os"
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

// childrenOf lists the children of pid's main thread, from
// /proc/<pid>/task/<pid>/children: one small read, whatever else runs on the
// machine. Orphans reparented to a subreaper are its main thread's children.
func childrenOf(pid int) []int {
	p := strconv.Itoa(pid)
	return threadChildren(p, p, nil)
}

// threadChildren appends to out the children of one thread (tid) of process
// pid, from /proc/<pid>/task/<tid>/children.
func threadChildren(pid, tid string, out []int) []int {
	data, err := os.ReadFile("/proc/" + pid + "/task/" + tid + "/children")
	if err != nil {
		return out
	}
	for _, f := range strings.Fields(string(data)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
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

// reapSession kills a session's processes and reaps them, finding them without
// looking at any other process: the driver's process group is killed as a
// group; a process that left it (setsid, as Chromium's crash handler does) is
// reparented to this process, its subreaper, when its parent dies, and is
// found among this process's children by the session's marker. Rounds repeat
// until the group is gone and no such child is left, for 5 s at most; it
// returns how many were left then. The driver itself is its wait goroutine's to reap.
func reapSession(driver int, marker string) int {
	self := os.Getpid()
	deadline := time.Now().Add(5 * time.Second)
	killed := map[int]bool{} // killed and not yet reaped
	clean := 0               // rounds in a row that found the session gone
	for {
		_ = syscall.Kill(-driver, syscall.SIGKILL)
		for _, c := range childrenOf(self) {
			if c == driver || killed[c] {
				continue
			}
			st, ok := statOf(c)
			if !ok || !(st.pgid == driver || (st.state != 'Z' && markerOf(c) == marker)) {
				continue
			}
			_ = syscall.Kill(c, syscall.SIGKILL)
			killed[c] = true
		}
		for c := range killed {
			var ws syscall.WaitStatus
			if got, err := syscall.Wait4(c, &ws, syscall.WNOHANG, nil); got == c || err != nil {
				delete(killed, c) // reaped (or not ours to reap)
			}
		}
		groupAlive := syscall.Kill(-driver, 0) == nil
		if len(killed) == 0 && !groupAlive {
			// Once more: a helper whose parent was reaped in this round was
			// reparented here after this round's look at the children.
			if clean++; clean == 2 {
				return 0
			}
			continue
		}
		clean = 0
		if time.Now().After(deadline) {
			n := len(killed)
			if groupAlive {
				n++
			}
			return n
		}
		time.Sleep(2 * time.Millisecond) // the kernel tears killed processes down in moments
	}
}

// reapOrphans reaps this process's children that have exited and that it
// never started: helpers that left their driver's session (setsid, as
// Chromium's crash handler does) and were reparented here, their subreaper,
// when their parent died. Such a helper exits by itself when its browser
// does, often after the session's reap has looked, and nothing else waits
// for it: left, each would hold a process-table entry for the hub's life. The
// hub starts every child of its own in its own session, so a child in
// another session is never one a goroutine of the hub waits for.
func reapOrphans() {
	self := os.Getpid()
	own, ok := statOf(self)
	if !ok {
		return
	}
	for _, c := range childrenOf(self) {
		if st, ok := statOf(c); ok && st.state == 'Z' && st.sess != own.sess {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(c, &ws, syscall.WNOHANG, nil)
		}
	}
}

// termGroup sends SIGTERM to what is left of the process group pgid (whose
// leader, the driver, is its wait goroutine's to reap) and waits up to d,
// while ctx lasts, for it to be gone; reapSession kills what stays. A member that has exited
// and was reparented here is reaped on the way, or the group would seem
// alive for the whole of d.
func termGroup(ctx context.Context, pgid int, d time.Duration) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // no process left in the group
	}
	self := os.Getpid()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && ctx.Err() == nil; <-tick.C {
		for _, c := range childrenOf(self) {
			if st, ok := statOf(c); ok && c != pgid && st.pgid == pgid && st.state == 'Z' {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(c, &ws, syscall.WNOHANG, nil)
			}
		}
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
	}
}
