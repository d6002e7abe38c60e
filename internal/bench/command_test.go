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
	"unsafe"
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
	fd, _, errno := syscall.Syscall(434, uintptr(pid), 0, 0) // pidfd_open
	if errno != 0 {
		t.Skipf("pidfd_open: %v", errno)
	}
	defer syscall.Close(int(fd))
	if exited(t, int(fd), 0) {
		t.Fatal("the sleeper ended before its tool did")
	}
	tool.Process.Kill()
	tool.Wait()
	if !exited(t, int(fd), 10*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("the sleeper outlived the killed tool by 10s: it was left running")
	}
}

// exited waits up to d for the process behind pidfd to exit (the pidfd turns
// readable), in ppoll(2).
func exited(t *testing.T, pidfd int, d time.Duration) bool {
	t.Helper()
	pfd := struct {
		fd             int32
		events, revent int16
	}{fd: int32(pidfd), events: 0x1} // POLLIN
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	for {
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch errno {
		case 0:
			return n == 1
		case syscall.EINTR:
			continue // Go's preemption signals; the rest of d is close enough
		default:
			t.Fatalf("ppoll: %v", errno)
		}
	}
}
