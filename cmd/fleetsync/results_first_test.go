package main

import (
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// A service that serves `results` before `columns` (JSON members are
// unordered; the spec names both without an order), with contexts large
// enough that the results of a default request pass what the client holds
// of them (fleetapi.MaxHeldResults): each request too large is read again
// in smaller ones, and the warehouse is exact, in a first sync and in the
// cycle after new and late points.
func TestSyncOfAServiceServingResultsFirstIsExactWhateverTheResponseSize(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	// 52 variables of 2,000 points with 512-byte contexts: about 1 MiB a
	// variable, 50 MiB for the first request of 50 variables.
	// idle_recheck 1ms: every cycle re-reads each variable's lookback,
	// late points and all, which is what makes the second cycle's
	// responses large too.
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Seed: 21, Devices: 4, Variables: 13, Points: 2000, Span: 2 * 24 * time.Hour,
		ContextBytes: 512, ResultsFirst: true}, sync: "idle_recheck: 1ms"})
	_, logs := w.sync()
	n := w.checkOracle()
	s := cycleSummary(t, logs)
	req, min := s["requests"].(float64), s["requests_minimum"].(float64)
	t.Logf("%d points in %v raw-series requests (minimum %v)", n, req, min)
	if req <= min {
		t.Fatalf("%v raw-series requests for a minimum of %v: no response was too large to hold, so the test shows nothing; summary: %s", req, min, summaryLine(logs))
	}
	w.addNewPoints(7, true, "")
	w.sync()
	w.checkOracle()
}
