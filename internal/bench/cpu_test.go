package bench

import (
	"math"
	"os"
	"os/exec"
	"testing"
	"time"
)

// The churn's CPU shares: a child that burns CPU shows in its reaper's
// children's time once reaped, and the machine's busy time covers it.
func TestCPUShares(t *testing.T) {
	if os.Getenv("WSBENCH_TEST_BURN") == "1" {
		// The child: spin until it has used burnFor of CPU, whatever the
		// machine's speed.
		for cpuSeconds(os.Getpid()) < burnFor.Seconds() {
		}
		os.Exit(0)
	}
	self := os.Getpid()
	s0 := readShares(self)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCPUShares$")
	cmd.Env = append(os.Environ(), "WSBENCH_TEST_BURN=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the burning child: %v: %s", err, out)
	}
	var run churnRun
	run.since(s0, self)
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if used < burnFor {
		t.Fatalf("the child used %v of CPU, less than the %v it spins for", used, burnFor)
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

// burnFor is the child's CPU in TestCPUShares: well above the kernel's 10 ms
// ticks the figures are counted in.
const burnFor = 200 * time.Millisecond
