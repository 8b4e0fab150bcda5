package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// The tests of this file sync a fleet that keeps writing, under every
// reading of lastActivity the spec allows, with the default configuration
// except for a short sync.idle_recheck where a test must wait for it.

// liveRecheck is the tests' sync.idle_recheck: long enough that back-to-back
// syncs skip idle variables, short enough to wait for.
const liveRecheck = 4 * time.Second

var lastActivityModes = []string{"any-write", "newest-write", "newest-ts", "none"}

func newLiveWorld(t *testing.T, mode string, sim fleetsim.Options) *world {
	t.Helper()
	m, err := fleetsim.ParseLastActivityMode(mode)
	if err != nil {
		t.Fatal(err)
	}
	sim.LastActivity = m
	if sim.Seed == 0 {
		sim.Seed = 11
	}
	return newWorld(t, worldOpts{sim: sim, sync: fmt.Sprintf("idle_recheck: %s", liveRecheck)})
}

var cycleLine = regexp.MustCompile(`"msg":"cycle finished".*?"idle":(\d+)`)

// idleOf is the idle count of the cycle a sync logged.
func idleOf(t testing.TB, logs string) int {
	t.Helper()
	m := cycleLine.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no cycle summary in the sync's log:\n%s", lastLines(logs, 10))
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// missingOutsideLate lists the source's points absent from the warehouse
// that are not late points: a point counts as late when the warehouse holds
// a newer point of its variable (it was written behind that variable's
// newest point, which some readings of lastActivity do not show).
func (w *world) missingOutsideLate() []string {
	w.t.Helper()
	want, got := w.expected(), w.loaded()
	newest := map[string]int64{}
	for k := range got {
		newest[k.variable] = max(newest[k.variable], k.ts)
	}
	var out []string
	for k := range want {
		if _, ok := got[k]; !ok && k.ts >= newest[k.variable] {
			out = append(out, fmt.Sprintf("%s@%d", k.variable, k.ts))
		}
	}
	return out
}

func TestLiveFleetLandsExactlyUnderEveryReadingOfLastActivity(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	for _, mode := range lastActivityModes {
		t.Run(mode, func(t *testing.T) {
			w := newLiveWorld(t, mode, fleetsim.Options{Devices: 8, Variables: 4, Points: 120, Span: 2 * time.Hour})
			w.sync()
			const ahead = time.Second
			wr, err := w.sim.StartWriter(fleetsim.WriterOptions{Seed: 5, Interval: 15 * time.Millisecond, NewPerStep: 1, LatePerStep: 1,
				LateMaxAge: 30 * time.Minute, AheadMax: ahead, ReportOnce: 0.2})
			if err != nil {
				t.Fatal(err)
			}
			syncs := 0
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) || syncs < 3; syncs++ {
				w.sync()
			}
			stats := wr.Stop()
			if stats.New == 0 || stats.Late == 0 || stats.Ahead == 0 || stats.ReportOnce == 0 {
				t.Fatalf("the writer did not write every kind of point: %+v", stats)
			}
			// Every point stamped ahead is due before the quiet sync starts.
			time.Sleep(ahead + 50*time.Millisecond)
			w.sync()
			// Between re-reads a cycle reads the points after each mark
			// alone, whatever lastActivity means: a late point may wait for
			// its variable's re-read, within idle_recheck; every other point
			// has landed.
			if miss := w.missingOutsideLate(); len(miss) > 0 {
				t.Fatalf("%d points that are not late points are missing after a quiet sync: %v", len(miss), miss[:min(8, len(miss))])
			}
			time.Sleep(liveRecheck)
			reread := time.Now()
			w.sync()
			n := w.checkOracle()
			w.checkRollups()
			t.Logf("%s: %d points, %+v written live during %d syncs; exact within idle_recheck", mode, n, stats, syncs)
			w.checkIdleCycleIsFree(mode, reread)
		})
	}
}

// checkIdleCycleIsFree runs a sync on the quiet fleet right after a
// complete one that began at since, with the default idle_recheck, and checks that skip_idle still saves
// the data requests whenever lastActivity is reported.
func (w *world) checkIdleCycleIsFree(mode string, since time.Time) {
	w.t.Helper()
	cfg, err := os.ReadFile(w.cfgPath)
	if err != nil {
		w.t.Fatal(err)
	}
	hourly := filepath.Join(w.dir, "hourly.yaml")
	if err := os.WriteFile(hourly, []byte(strings.Replace(string(cfg), "idle_recheck: "+liveRecheck.String(), "idle_recheck: 1h", 1)), 0o600); err != nil {
		w.t.Fatal(err)
	}
	total := 0
	for _, d := range w.sim.Devices() {
		total += len(d.Variables)
	}
	// The sync before re-read every variable (idle_recheck had passed), and
	// this one re-reads those whose phase of the hour came round since
	// (pipeline.RecheckAt), however soon it runs: where one came, the idle
	// sync is run again.
	var logs string
	for try := 0; ; try++ {
		w.sim.ResetCounters()
		next := time.Now()
		var code int
		code, _, logs = w.cli(context.Background(), "sync", "--config", hourly)
		if code != 0 {
			w.t.Fatalf("sync exited %d: %s", code, lastLines(logs, 5))
		}
		if try == 2 || !w.rereadPhaseCame(since, time.Now(), time.Hour, 50) {
			break
		}
		since = next
	}
	want, wantData := total, 0
	if mode == "none" {
		want, wantData = 0, 1 // nothing to trust: every variable is read
	}
	if got, data := idleOf(w.t, logs), w.dataRequests(); got != want || (wantData == 0) != (data == 0) {
		w.t.Fatalf("%s: an idle cycle right after a complete sync skipped %d of %d variables with %d data requests; want %d skipped", mode, got, total, data, want)
	}
}

// statusLag is the lag status reports for one variable.
func (w *world) statusLag(variableID string) float64 {
	w.t.Helper()
	code, out, errs := w.cli(context.Background(), "status", "--config", w.cfgPath, "--json", "--limit", "0")
	if code != 0 {
		w.t.Fatalf("status exited %d: %s", code, errs)
	}
	var st struct {
		Worst []struct {
			VariableID string  `json:"variable_id"`
			LagSeconds float64 `json:"lag_seconds"`
		} `json:"worst"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		w.t.Fatalf("status --json: %v\n%s", err, out)
	}
	for _, r := range st.Worst {
		if r.VariableID == variableID {
			return r.LagSeconds
		}
	}
	w.t.Fatalf("status does not list variable %s", variableID)
	return 0
}

func TestLatePointsIntoAnIdleVariableLandWithinIdleRecheck(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	for _, mode := range lastActivityModes {
		t.Run(mode, func(t *testing.T) {
			w := newLiveWorld(t, mode, fleetsim.Options{Devices: 3, Variables: 3, Points: 60, Span: time.Hour})
			w.sync()
			// A variable with data (fleetsim leaves one empty).
			var v fleetsim.Variable
			var pts []fleetsim.SimPoint
			for _, d := range w.sim.Devices() {
				for _, cand := range d.Variables {
					if p := w.sim.Points(cand.ID); len(p) > len(pts) {
						v, pts = cand, p
					}
				}
			}
			newest := pts[len(pts)-1].TimestampMs
			// Three late points behind the newest, inside lookback, on
			// timestamps the variable does not hold yet.
			var late []fleetsim.SimPoint
			for i := int64(1); i <= 3; i++ {
				late = append(late, fleetsim.SimPoint{TimestampMs: newest - 7*i - 1, Value: float64(1000 + i)})
			}
			if err := w.sim.AddPoints(v.ID, late); err != nil {
				t.Fatal(err)
			}
			// The first sync re-read every variable and ended (RecheckedMs)
			// before it returned: a sync started idle_recheck after that must
			// land the late points, whatever lastActivity means; those in
			// between read the points after the mark alone.
			checked := time.Now()
			landed := func() bool {
				got := w.loaded()
				for _, p := range late {
					if _, ok := got[pointKey{v.ID, p.TimestampMs}]; !ok {
						return false
					}
				}
				return true
			}
			for syncs := 0; ; syncs++ {
				began := time.Now()
				w.sync()
				if landed() {
					t.Logf("%s: late points landed in sync %d, %s after the first sync", mode, syncs+1, time.Since(checked).Round(time.Millisecond))
					break
				}
				if began.Sub(checked) >= liveRecheck {
					t.Fatalf("the late points of %s did not land in a sync started %s after the last complete read (idle_recheck %s)", v.ID, began.Sub(checked).Round(time.Millisecond), liveRecheck)
				}
				time.Sleep(200 * time.Millisecond)
			}
			w.checkOracle()
			w.checkRollups()
			if lag := w.statusLag(v.ID); lag != 0 {
				t.Fatalf("status shows %s lagging %.3fs after its points landed", v.ID, lag)
			}
		})
	}
}

func TestAPointStampedAheadLandsOnceDueAndLagsUntilThen(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	for _, mode := range lastActivityModes {
		t.Run(mode, func(t *testing.T) {
			w := newLiveWorld(t, mode, fleetsim.Options{Devices: 2, Variables: 2, Points: 30, Span: time.Hour})
			w.sync()
			v := w.sim.Devices()[0].Variables[1]
			due := time.Now().Add(2500 * time.Millisecond)
			// A device whose clock runs ahead reports once, then sleeps.
			if err := w.sim.AddPoints(v.ID, []fleetsim.SimPoint{{TimestampMs: due.UnixMilli(), Value: 7}}); err != nil {
				t.Fatal(err)
			}
			w.sync()
			// A sync that returned before the point's time began before it:
			// it must not have loaded it. (On a machine so slow that the
			// sync began after it, loading it was right.)
			if time.Now().Before(due) {
				if _, ok := w.loaded()[pointKey{v.ID, due.UnixMilli()}]; ok {
					t.Fatal("a point was loaded before its timestamp: the mark would run ahead of the clock")
				}
				time.Sleep(time.Until(due) + 50*time.Millisecond)
				// Due now and not loaded: the point is known to be missing.
				if lag := w.statusLag(v.ID); lag <= 0 {
					t.Fatalf("status shows %s with lag %v while its point ahead is due and missing", v.ID, lag)
				}
			} else {
				t.Logf("the sync took longer than the point was ahead; nothing to check before it was due")
			}
			w.sync()
			w.checkOracle()
			w.checkRollups()
			if lag := w.statusLag(v.ID); lag != 0 {
				t.Fatalf("status shows %s lagging %.3fs after its point landed", v.ID, lag)
			}
		})
	}
}
