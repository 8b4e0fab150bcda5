package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// marks reads the high-water marks as the state store keeps them.
func (w *world) marks() map[string]int64 {
	w.t.Helper()
	rows, err := w.conn.Query(context.Background(), fmt.Sprintf("SELECT variable_id, max(hwm_ms) FROM `%s`.sync_state GROUP BY variable_id", w.db))
	if err != nil {
		if unknownTable(err) {
			return map[string]int64{}
		}
		w.t.Fatalf("read marks: %v", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var hwm int64
		if err := rows.Scan(&id, &hwm); err != nil {
			w.t.Fatal(err)
		}
		out[id] = hwm
	}
	return out
}

// checkMarksCovered asserts no mark passed a point that is not loaded, and
// that no mark moved backwards since prev.
func (w *world) checkMarksCovered(prev map[string]int64) map[string]int64 {
	w.t.Helper()
	marks := w.marks()
	for id, old := range prev {
		if marks[id] < old {
			w.t.Fatalf("mark of %s moved backwards: %d -> %d", id, old, marks[id])
		}
	}
	want, got := w.expected(), w.loaded()
	for k := range want {
		if hwm, ok := marks[k.variable]; ok && k.ts <= hwm {
			if _, loaded := got[k]; !loaded {
				w.t.Fatalf("mark of %s is %d but the point at %d below it is not loaded", k.variable, hwm, k.ts)
			}
		}
	}
	return marks
}

func TestSyncKilledAtRandomMomentsThenRerunIsExact(t *testing.T) {
	bin := fleetsyncBinary(t)
	w := newWorld(t, worldOpts{
		sim:   fleetsim.Options{Devices: 6, Variables: 4, Points: 1500, Span: 20 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 3 * time.Millisecond}},
		extra: "rows_per_request: 400\nvariables_per_request: 3\nmax_in_flight: 2\nbatch_rows: 2000",
	})
	prev := map[string]int64{}
	// Kill points spread from the metadata walk to the last commits.
	for i, delay := range []time.Duration{30 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond} {
		cmd := exec.Command(bin, "sync", "--config", w.cfgPath)
		cmd.Env = childEnv()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		t.Logf("kill %d after %s: %v", i, delay, err)
		prev = w.checkMarksCovered(prev)
	}
	w.sync()
	w.checkMarksCovered(prev)
	w.checkOracle()
	w.checkRollups()
}
