package bench

import (
	"math"
	"os"
	"os/exec"
	"testing"
)

// The churn's CPU shares: a child that burns CPU shows in its reaper's
// children's time once reaped, not before, and the machine's busy time
// covers it.
func TestCPUShares(t *testing.T) {
	self := os.Getpid()
	s0 := readShares(self)
	// About a fifth of a second of one CPU in a shell loop.
	cmd := exec.Command("/bin/sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var run churnRun
	run.since(s0, self)
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if used.Seconds() < 0.05 {
		t.Skipf("the loop took only %v of CPU here: too little to compare at the kernel's 10 ms ticks", used)
	}
	if d := run.stubs - used.Seconds(); d < -0.02 || d > 0.02 {
		t.Fatalf("children's CPU grew %.3f s for a child that used %.3f s", run.stubs, used.Seconds())
	}
	if run.machine < run.stubs-0.02 {
		t.Fatalf("the machine's busy time grew %.3f s, less than the child's %.3f s alone", run.machine, run.stubs)
	}
	if run.tool < 0 || run.tool > run.machine+0.02 {
		t.Fatalf("the tool's own CPU %.3f s against the machine's %.3f s", run.tool, run.machine)
	}
	run.sessions = 10
	if got, want := run.perSession(run.stubs), run.stubs*100; math.Abs(got-want) > 1e-9 {
		t.Fatalf("perSession = %v, want %v ms", got, want)
	}
}
