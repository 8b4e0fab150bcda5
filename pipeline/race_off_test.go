//go:build !race

package pipeline_test

// raceOn: see race_on_test.go.
const raceOn = false
