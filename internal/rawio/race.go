//go:build race

package rawio

// raceEnabled leaves connections as they are in race-detector builds: Go's
// own Write tells the detector that what happened before a write happened
// before the read of it at the other end, and code (tests above all) relies
// on that edge; a raw write cannot give it. The package's own tests wrap
// regardless, so the raw path is tested under the detector too.
const raceEnabled = true
