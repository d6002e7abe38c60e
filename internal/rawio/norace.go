//go:build !race

package rawio

// raceEnabled: see race.go.
const raceEnabled = false
