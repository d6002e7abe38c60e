package bench

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process the load tool starts dies with the tool, even when the tool is
// killed outright (SIGKILL: no defer, no signal handler runs). The test binary
// runs itself as the "tool", which starts a sleeper and is then killed.
func TestCommandDiesWithTheTool(t *testing.T) {
	if os.Getenv("WSBENCH_TEST_TOOL") == "1" {
		c := command("sleep", "300")
		if err := c.Start(); err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(strconv.Itoa(c.Process.Pid) + "\n")
		time.Sleep(time.Hour) // until the test kills this process
		return
	}
	// PR_SET_CHILD_SUBREAPER: the sleeper, orphaned when its tool dies, is
	// reparented here rather than to init.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, 36, 1, 0); errno != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
	defer syscall.RawSyscall(syscall.SYS_PRCTL, 36, 0, 0)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tool := exec.Command(self, "-test.run=^TestCommandDiesWithTheTool$")
	tool.Env = append(os.Environ(), "WSBENCH_TEST_TOOL=1")
	out, err := tool.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	defer tool.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("the tool's sleeper: %q, %v", line, err)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the sleeper ended before its tool did")
	}
	tool.Process.Kill()
	tool.Wait()
	// The tool's orphans are this process's children now (its subreaper):
	// waited for, not looked for.
	ended := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		ended <- ws
	}()
	select {
	case ws := <-ended:
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("the sleeper ended with %v, want killed by SIGKILL", ws)
		}
	case <-time.After(10 * time.Second):
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("the sleeper outlived the killed tool by 10s: it was left running")
	}
}
