//go:build !race

package rawwrite

// raceEnabled: see race.go.
const raceEnabled = false
