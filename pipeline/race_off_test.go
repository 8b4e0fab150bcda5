//go:build !race

package pipeline

// raceOn: see race_on_test.go.
const raceOn = false
