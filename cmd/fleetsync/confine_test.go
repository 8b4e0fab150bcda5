package main

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// A request of 50 variables (the default variables_per_request) in which
// one variable is bad: its data undecodable, or the whole request rejected
// with a 400 naming it. The other 49 land and their marks move; the bad one
// fails alone with a line naming its device, variable and window.
func TestOneBadVariableFailsAloneAndItsRequestMatesLand(t *testing.T) {
	for _, kind := range []string{"undecodable", "rejected"} {
		t.Run(kind, func(t *testing.T) {
			w := newWorld(t, worldOpts{sim: fleetsim.Options{Seed: 3, Devices: 1, Variables: 50, Points: 40, Span: time.Hour}})
			vars := w.sim.Devices()[0].Variables
			bad := vars[17]
			// Non-finite values, as Python's json writes them, land too.
			now := time.Now().Add(-time.Minute).UnixMilli()
			nonFinite := map[string]float64{vars[3].ID: math.NaN(), vars[4].ID: math.Inf(1), vars[5].ID: math.Inf(-1)}
			for id, v := range nonFinite {
				if err := w.sim.AddPoints(id, []fleetsim.SimPoint{{TimestampMs: now, Value: v}}); err != nil {
					t.Fatal(err)
				}
			}
			f := fleetsim.Faults{}
			if kind == "undecodable" {
				f.UndecodableVariables = []string{bad.ID}
			} else {
				f.RejectVariables = []string{bad.ID}
			}
			w.sim.SetFaults(f)
			code, _, logs := w.cli(context.Background(), "sync", "--config", w.cfgPath)
			if code != 1 {
				t.Fatalf("sync exited %d with one bad variable, want 1; log:\n%s", code, lastLines(logs, 10))
			}
			lines := logLines(t, logs, "variable failed")
			if len(lines) != 1 || lines[0]["variable_id"] != bad.ID {
				t.Fatalf("want one 'variable failed' line, for %s; got %v", bad.ID, lines)
			}
			l := lines[0]
			errText, _ := l["error"].(string)
			window, _ := l["window"].(string)
			if l["device"] != w.sim.Devices()[0].Label || l["variable"] != bad.Label || !strings.Contains(window, "..") || errText == "" || strings.Contains(errText, "\n") {
				t.Fatalf("the failure's line lacks the device, variable, window or a one-line error: %v", l)
			}
			loaded := w.loaded()
			marks := w.marks()
			want := map[string][]int64{}
			for k := range w.expected() {
				want[k.variable] = append(want[k.variable], k.ts)
			}
			for i, v := range vars {
				n, newest := 0, int64(0)
				var missing []int64
				for _, ts := range want[v.ID] {
					newest = max(newest, ts)
					if _, ok := loaded[pointKey{v.ID, ts}]; ok {
						n++
					} else {
						missing = append(missing, ts)
					}
				}
				switch {
				case v.ID == bad.ID && (n != 0 || marks[v.ID] != 0):
					t.Fatalf("the bad variable loaded %d points, mark %d", n, marks[v.ID])
				case v.ID != bad.ID && (len(want[v.ID]) == 0 || len(missing) > 0 || marks[v.ID] < newest):
					t.Fatalf("variable %d (%s) loaded %d of %d in-retention points (missing %v), mark %d below its newest %d, beside the bad one", i, v.ID, n, len(want[v.ID]), missing, marks[v.ID], newest)
				}
			}
			for id, want := range nonFinite {
				got, ok := loaded[pointKey{id, now}]
				if !ok || !(math.IsNaN(want) && math.IsNaN(got.value) || got.value == want) {
					t.Fatalf("%s: the non-finite value %v landed as %+v (present %v)", id, want, got, ok)
				}
			}
			// Once the variable is readable again, the next cycle is exact.
			w.sim.SetFaults(fleetsim.Faults{})
			w.sync()
			w.checkOracle()
		})
	}
}

// rows_per_request: 1, which validation accepts, makes every frame of more
// than one point a cut one: the windows are halved down to one millisecond,
// where a full frame is complete.
func TestOneRowPerRequestSyncsExactly(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Seed: 5, Devices: 2, Variables: 2, Points: 12, Span: time.Hour}, sync: "rows_per_request: 1"})
	w.sync()
	if n := w.checkOracle(); n < 30 {
		t.Fatalf("only %d points: the test needs several per variable", n)
	}
	w.sync()
	w.checkOracle()
}
