package process

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkExecWithOpenDescriptors is why a driver start slowed as the hub held
// more connections (the waiters scenario's hand-off at 15,000), and what the
// spawner does about it: an exec copies the forking thread's descriptor table
// into the child and closes it again there, in proportion to the descriptors
// open. "here" forks from the benchmark's own thread (os/exec), "spawner" from
// the launcher's spawner thread, made before the descriptors were opened, as
// the hub makes it before it accepts connections. /bin/true stands in for a
// driver.
func BenchmarkExecWithOpenDescriptors(b *testing.B) {
	s, err := newSpawner()
	if err != nil {
		b.Fatalf("spawner: %v", err)
	}
	defer s.stop()
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	for _, n := range []int{0, 1000, 15000} {
		var files []*os.File
		for len(files) < n {
			r, w, err := os.Pipe()
			if err != nil {
				b.Skipf("%d descriptors: %v (the open-file limit)", n, err)
			}
			files = append(files, r, w)
		}
		b.Run(fmt.Sprintf("open=%d/fork=here", n), func(b *testing.B) {
			for b.Loop() {
				if err := exec.Command("/bin/true").Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("open=%d/fork=spawner", n), func(b *testing.B) {
			for b.Loop() {
				pid, err := s.start(&spawnReq{path: "/bin/true", argv: []string{"true"}, out: int(out.Fd())})
				if err != nil {
					b.Fatal(err)
				}
				if why := waitPid(pid); why != "exit status 0" {
					b.Fatal(why)
				}
			}
		})
		for _, f := range files {
			f.Close()
		}
	}
}

// What picking a driver's port costs a start: a bind to check it is free,
// and the reservation.
func BenchmarkReservePort(b *testing.B) {
	l := &Launcher{ports: map[int]bool{}}
	for b.Loop() {
		port, err := l.reservePort()
		if err != nil {
			b.Fatal(err)
		}
		l.freePort(port)
	}
}
