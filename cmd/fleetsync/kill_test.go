package main

import (
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

func TestSyncKilledAtRandomMomentsThenRerunIsExact(t *testing.T) {
	w := newWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: 6, Variables: 4, Points: 1500, Span: 20 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 3 * time.Millisecond}},
		sync: "rows_per_request: 400\nvariables_per_request: 3\nmax_in_flight: 2\nbatch_rows: 2000",
	})
	prev := map[string]int64{}
	// Kill points spread from the metadata walk to the last commits.
	for i, delay := range []time.Duration{30 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond} {
		p := startBinary(t, nil, "sync", "--config", w.cfgPath)
		time.Sleep(delay)
		p.kill()
		t.Logf("kill %d after %s: %v", i, delay, p.err)
		prev = w.checkMarksCovered(prev)
	}
	w.sync()
	w.checkMarksCovered(prev)
	w.checkOracle()
	w.checkRollups()
}
