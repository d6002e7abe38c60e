package rawio

import (
	"syscall"
	"testing"
)

// BenchmarkSyscallFloor is the cheapest system call there is (getppid, raw):
// the machine's fixed price of entering and leaving the kernel, which every
// read and write of a command pays on top of its work. Tens of ns on bare
// metal; ~1 µs on a PVM guest (docs/benchmarks.md).
func BenchmarkSyscallFloor(b *testing.B) {
	for b.Loop() {
		syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
	}
}

// BenchmarkReadNothing is a read(2) on an empty non-blocking socket — EAGAIN,
// what the first read after sending a request to a driver costs, since the
// answer is never there yet.
func BenchmarkReadNothing(b *testing.B) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	buf := make([]byte, 1)
	for b.Loop() {
		if _, err := syscall.Read(fds[0], buf); err != syscall.EAGAIN {
			b.Fatalf("read on an empty socket: %v, want EAGAIN", err)
		}
	}
}
