//go:build race

package pipeline_test

// raceOn says the tests run under the race detector, which slows the
// simulation's seeds about tenfold: TestSimulation then runs simRaceSeeds
// of the fixed seeds by default, and `make test` runs all of them in a
// second pass without it.
const raceOn = true
