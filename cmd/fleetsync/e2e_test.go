package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

func TestSyncFirstCycleLoadsEveryInRetentionPointExactly(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.sync()
	n := w.checkOracle()
	if n < 1000 {
		t.Fatalf("the fleet has only %d in-retention points; the test needs a real fleet", n)
	}
	// The source also holds points older than retention (fleetsim keeps some
	// past the window); the oracle above shows none of them was loaded.
	floor := time.Now().Add(-w.retention).UnixMilli()
	old := 0
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			for _, p := range w.sim.Points(v.ID) {
				if p.TimestampMs < floor {
					old++
				}
			}
		}
	}
	if old == 0 {
		t.Fatal("the source holds no point outside retention, so the test cannot show none is loaded")
	}
	t.Logf("%d in-retention points loaded, %d older points in the source left out", n, old)
	// Labels and positions are filled from the source.
	labels := map[string][2]string{}
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			labels[v.ID] = [2]string{d.Label, v.Label}
		}
	}
	positions := 0
	for k, r := range w.loaded() {
		if want := labels[k.variable]; r.deviceLabel != want[0] || r.variableLabel != want[1] {
			t.Fatalf("%v: labels %q/%q, want %q/%q", k, r.deviceLabel, r.variableLabel, want[0], want[1])
		}
		lat, hasLat := r.context["lat"].(float64)
		lng, hasLng := r.context["lng"].(float64)
		if hasLat != (r.lat != nil) || hasLng != (r.lng != nil) || (hasLat && *r.lat != lat) || (hasLng && *r.lng != lng) {
			t.Fatalf("%v: lat/lng columns %v/%v do not match context %v", k, r.lat, r.lng, r.context)
		}
		if hasLat {
			positions++
		}
	}
	if positions == 0 {
		t.Fatalf("no position points loaded; the fleet should have position variables")
	}
}

func TestSyncSecondCycleWithNoNewDataMakesNoDataRequests(t *testing.T) {
	// Several data requests per variable in the first cycle, so that "far
	// fewer" means something: the idle cycle may only walk the metadata.
	w := newWorld(t, worldOpts{sync: "rows_per_request: 100\nvariables_per_request: 2"})
	began := time.Now()
	_, logs1 := w.sync()
	first, firstData := w.allRequests(), w.dataRequests()
	rows1, before := w.rawRows(), w.rawRows()
	// A cycle re-reads the variables whose phase of idle_recheck (the
	// default hour; one slot per 2 variables here) came round since their
	// last re-read, however soon after a complete cycle it runs: where a
	// phase came between the two syncs, the idle one is run again.
	var second, secondData int
	var rows2 uint64
	var logs2 string
	for try := 0; ; try++ {
		w.sim.ResetCounters()
		next := time.Now()
		_, logs2 = w.sync()
		second, secondData = w.allRequests(), w.dataRequests()
		rows2 = w.rawRows()
		if try == 2 || !w.rereadPhaseCame(began, time.Now(), time.Hour, 2) {
			break
		}
		t.Logf("a re-read phase came between the syncs started at %s and %s: the idle sync again", began.Format(time.StampMilli), next.Format(time.StampMilli))
		began, before = next, rows2
	}
	t.Logf("API requests: first cycle %d (%d data), second cycle %d (%d data); datapoints rows %d then %d", first, firstData, second, secondData, rows1, rows2)
	if secondData != 0 {
		t.Fatalf("an idle cycle made %d data requests: %v", secondData, w.sim.Counters())
	}
	if second*2 > first {
		t.Fatalf("the idle cycle made %d API requests, the first %d: not far fewer", second, first)
	}
	if rows2 != before {
		t.Fatalf("the idle cycle inserted %d rows into datapoints", int64(rows2)-int64(before))
	}
	// The cycle summary reports what was read and requested.
	s1, s2 := cycleSummary(t, logs1), cycleSummary(t, logs2)
	// Data requests are raw-series reads and the counts that proved full
	// frames whole; points loaded twice (a cut frame's edges) are reported.
	if s1["requests"].(float64)+s1["count_requests"].(float64) != float64(firstData) || s1["points"].(float64)-s1["reloaded"].(float64) != float64(w.checkOracle()) {
		t.Fatalf("first cycle's summary reports %v requests, %v counts and %v points (%v loaded twice); fleetsim counted %d data requests, the warehouse holds %d rows",
			s1["requests"], s1["count_requests"], s1["points"], s1["reloaded"], firstData, rows1)
	}
	if s2["requests"] != float64(0) || s2["points"] != float64(0) || s2["idle"] != s2["variables"] {
		t.Fatalf("idle cycle's summary: requests %v, points %v, idle %v of %v variables; want 0, 0, all", s2["requests"], s2["points"], s2["idle"], s2["variables"])
	}
	w.checkOracle()
}

// TestSyncLoadsNewAndLatePointsOnce: the cycle after new and late points
// loads the new ones (it reads after each mark); a cycle once idle_recheck
// has passed re-reads the lookback and loads the late ones; each lands
// once.
func TestSyncLoadsNewAndLatePointsOnce(t *testing.T) {
	w := newWorld(t, worldOpts{sync: fmt.Sprintf("idle_recheck: %s", liveRecheck)})
	w.sync()
	reread := time.Now()
	d := w.sim.Devices()[0]
	now := time.Now().UnixMilli()
	var changed []string
	for i, v := range d.Variables {
		pts := w.sim.Points(v.ID)
		if len(pts) == 0 {
			continue
		}
		newest := pts[len(pts)-1].TimestampMs
		add := []fleetsim.SimPoint{
			{TimestampMs: now - int64(i) - 10, Value: 1000 + float64(i), Context: map[string]any{"note": "new"}},
			// Late: older than the variable's newest point, inside the lookback.
			{TimestampMs: newest - 20*60*1000 + int64(i), Value: -5, Context: map[string]any{"lat": 1.25, "lng": 2.5}},
		}
		if err := w.sim.AddPoints(v.ID, add); err != nil {
			t.Fatal(err)
		}
		changed = append(changed, v.ID)
	}
	// The second device's variables get a late point only: their newest
	// point stays the same, and only their lastActivity says they changed.
	lateOnly := 0
	for _, v := range w.sim.Devices()[1].Variables {
		pts := w.sim.Points(v.ID)
		if len(pts) == 0 {
			continue
		}
		late := fleetsim.SimPoint{TimestampMs: pts[len(pts)-1].TimestampMs - 30*60*1000 + 1, Value: 7, Context: map[string]any{"note": "late"}}
		if err := w.sim.AddPoints(v.ID, []fleetsim.SimPoint{late}); err != nil {
			t.Fatal(err)
		}
		lateOnly++
	}
	if lateOnly == 0 {
		t.Fatal("the second device has no variable with points")
	}
	if len(changed) == 0 {
		t.Fatal("the first device has no variable with points")
	}
	w.sim.ResetCounters()
	w.sync()
	if miss := w.missingOutsideLate(); len(miss) > 0 {
		t.Fatalf("%d new points are missing after the next sync: %v", len(miss), miss[:min(8, len(miss))])
	}
	time.Sleep(time.Until(reread.Add(liveRecheck)))
	w.sync()
	w.checkOracle()
	w.checkRollups()
	// A third cycle changes nothing and the set stays exact.
	w.sync()
	w.checkOracle()
}

func TestSyncReReadsFramesCutByLimit(t *testing.T) {
	w := newWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: 2, Variables: 3, Points: 900, Span: 10 * 24 * time.Hour},
		sync: "rows_per_request: 64\nvariables_per_request: 4",
	})
	_, logs := w.sync()
	w.checkOracle()
	if !strings.Contains(logs, `"splits":`) || strings.Contains(logs, `"splits":0`) {
		t.Fatalf("no frame was split with a limit of 64 over 900 points; summary: %s", lastLines(logs, 3))
	}
}

func TestSyncPicksUpTokenRotatedMidCycle(t *testing.T) {
	w := newWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: 3, Variables: 4, Points: 400, Span: 10 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 20 * time.Millisecond}},
		sync: "max_in_flight: 1\nvariables_per_request: 1",
	})
	done := make(chan struct{})
	var once sync.Once
	go func() {
		// Rotate once the cycle is reading data, as Kubernetes does: the
		// new token is valid and mounted in the token file before the old
		// one expires. (Expiring first left a moment when neither the
		// file's token nor the one in use was valid: a request rejected
		// then re-read the old token, was rejected again and failed its
		// variable, as it should.)
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if w.dataRequests() >= 3 {
				w.sim.AddToken("rotated-token", fleetsim.TokenOrdinary, time.Hour)
				w.writeToken("rotated-token")
				w.sim.ExpireToken(testToken)
				once.Do(func() { close(done) })
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, logs := w.sync()
	select {
	case <-done:
	default:
		t.Fatal("the cycle finished before the token was rotated; slow it down")
	}
	w.checkOracle()
	if strings.Contains(logs, "rotated-token") {
		t.Fatal("the new token appears in the logs")
	}
	if !strings.Contains(logs, "token rejected; re-reading it and retrying once") {
		t.Fatalf("no request was rejected and retried with the re-read token: the rotation was not exercised; log:\n%s", lastLines(logs, 10))
	}
}

func TestBadConfigurationsExitWithAClearOneLineMessage(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 1, Variables: 1, Points: 10, Span: time.Hour}})
	good, err := os.ReadFile(w.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		edit   func(string) string
		token  string
		code   int
		wantIn string
	}{
		// wantIn names the key at fault and how to fix it.
		{"missing base_url", func(s string) string { return strings.Replace(s, "base_url: "+w.http.URL, "", 1) }, "", 2, "source.base_url: required; set it to"},
		{"unknown key", func(s string) string { return strings.Replace(s, "lookback: 1h", "lookbak: 1h", 1) }, "", 2, `unknown key "sync.lookbak" (did you mean "sync.lookback"?)`},
		{"bad duration", func(s string) string { return strings.Replace(s, "lookback: 1h", "lookback: 1 hour", 1) }, "", 2, "sync.lookback: invalid duration"},
		{"unreachable clickhouse", func(s string) string { return strings.Replace(s, w.chAddr, "127.0.0.1:1", 1) }, "", 1, "check clickhouse.addr"},
		{"wrong token", func(s string) string { return s }, "not-the-token", 1, "put a valid token in source.token_file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(path, []byte(c.edit(string(good))), 0o600); err != nil {
				t.Fatal(err)
			}
			if c.token != "" {
				w.writeToken(c.token)
				defer w.writeToken(testToken)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			code, _, errs := w.cli(ctx, "sync", "--config", path)
			last := lastLines(errs, 1)
			t.Logf("exit %d: %s", code, last)
			if code != c.code || !strings.Contains(last, c.wantIn) || !strings.HasPrefix(last, "fleetsync sync: ") {
				t.Fatalf("exit %d (want %d), last line %q (want it to name %q)", code, c.code, last, c.wantIn)
			}
			// One line: a bad configuration prints nothing but its error, and
			// no failure prints a stack trace.
			if c.code == 2 && strings.Count(strings.TrimRight(errs, "\n"), "\n") != 0 {
				t.Fatalf("a bad configuration printed more than one line:\n%s", errs)
			}
			if strings.Contains(errs, "goroutine ") || strings.Contains(errs, "panic") {
				t.Fatalf("the output carries a stack trace:\n%s", errs)
			}
			if strings.Contains(errs, c.token) && c.token != "" {
				t.Fatal("the token appears in the error output")
			}
		})
	}
}
