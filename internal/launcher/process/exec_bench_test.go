package process

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkExecWithOpenDescriptors is why a driver start slows as the hub
// holds more connections (the waiters scenario's hand-off at 15,000): an exec
// copies the parent's descriptor table into the child and closes it again
// there, in proportion to the descriptors open. /bin/true stands in for a
// driver.
func BenchmarkExecWithOpenDescriptors(b *testing.B) {
	for _, n := range []int{0, 1000, 15000} {
		b.Run(fmt.Sprintf("open=%d", n), func(b *testing.B) {
			var files []*os.File
			defer func() {
				for _, f := range files {
					f.Close()
				}
			}()
			for len(files) < n {
				r, w, err := os.Pipe()
				if err != nil {
					b.Skipf("%d descriptors: %v (the open-file limit)", n, err)
				}
				files = append(files, r, w)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := exec.Command("/bin/true").Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
