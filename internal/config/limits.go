package config

import (
	"fmt"
	"math"
	"strconv"

	units "github.com/docker/go-units"
)

// ShmSizeDefault is the /dev/shm a container gets when its entry sets no
// "shmSize": Selenoid's 256 MiB. Docker's own 64 MiB is too little for
// Chromium in images that do not pass --disable-dev-shm-usage (aerokube's):
// its tabs crash.
const ShmSizeDefault = 256 << 20

// ParseMem reads a memory size as Selenoid reads -mem and browsers.json
// "mem": with Docker's RAMInBytes, so every value Selenoid takes means the
// same here — bytes, or binary units k, m, g, t, p in either case with an
// optional "b" or "ib" (512m, 1gb, 1GiB, 2t). "0" is no limit, as to
// Docker; "" is 0 too, so that callers fall back to their default first.
func ParseMem(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := units.RAMInBytes(s)
	// A float times a unit can pass int64: Go's conversion then wraps.
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a memory size: give bytes or a number with k, m, g, t or p (binary units, such as 512m, 1g or 1GiB; 0 for no limit)", s)
	}
	return n, nil
}

// ParseCPU reads a CPU count as Selenoid reads -cpu and browsers.json "cpu"
// (a float: 0.5, 2) into Docker's NanoCPUs. "0" is no limit, as Selenoid
// passes it to Docker; "" is 0 too. A negative count, which Docker refuses
// at every start, is refused here.
func ParseCPU(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) || n*1e9 > math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a CPU count: give a number of CPUs such as 0.5 or 2 (0 for no limit)", s)
	}
	return int64(n * 1e9), nil
}
