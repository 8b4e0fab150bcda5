package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline"
)

func TestVerifyCatchesADeletedWarehouseRowAndRepairFixesIt(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 3, Variables: 3, Points: 200, Span: 5 * 24 * time.Hour}})
	w.sync()
	ctx := context.Background()
	toMs := time.Now().UnixMilli()
	from, to := "2000-01-01T00:00:00Z", fmt.Sprint(toMs)
	verify := func(extra ...string) (int, string, string) {
		t.Helper()
		return w.cli(ctx, append([]string{"verify", "--config", w.cfgPath, "--from", from, "--to", to}, extra...)...)
	}
	code, out, errs := verify()
	if code != 0 || !strings.Contains(out, "0 mismatch") {
		t.Fatalf("verify right after a sync exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}

	d := w.sim.Devices()[0]
	v := d.Variables[0]
	pts := w.sim.Points(v.ID)
	victim := pts[len(pts)/2]
	if err := w.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE `%s`.datapoints DELETE WHERE variable_id = '%s' AND ts_ms = %d", w.db, v.ID, victim.TimestampMs)); err != nil {
		t.Fatalf("delete a warehouse row: %v", err)
	}
	w.waitMutations()
	if n := len(w.loaded()); n != w.checkOracleCount()-1 {
		t.Fatalf("after the deletion the warehouse holds %d points, want one fewer than the source's %d", n, w.checkOracleCount())
	}

	code, out, errs = verify()
	if code != 1 {
		t.Fatalf("verify with a deleted row exited %d, want 1:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	n := w.sim.PointCountBetween(v.ID, w.sim.RetentionFloor().Add(w.margin).UnixMilli(), toMs)
	wantRow := regexp.MustCompile(regexp.QuoteMeta(d.Label) + `\s+` + regexp.QuoteMeta(v.Label) + fmt.Sprintf(`\s+%d\s+%d\s`, n, n-1))
	if !wantRow.MatchString(out) || !strings.Contains(out, "1 mismatch") {
		t.Fatalf("verify output does not show %s/%s with source %d and warehouse %d:\n%s", d.Label, v.Label, n, n-1, out)
	}
	if last := lastLines(errs, 1); !strings.HasPrefix(last, "fleetsync verify: 1 of 9 variables disagree") || !strings.Contains(last, "--repair") {
		t.Fatalf("last stderr line %q; want the disagreement summarised with the next step", last)
	}

	code, out, _ = verify("--json")
	var rep struct {
		Variables  int `json:"variables"`
		Matched    int `json:"matched"`
		Mismatches []struct {
			VariableID     string `json:"variable_id"`
			DeviceLabel    string `json:"device_label"`
			SourceCount    int64  `json:"source_count"`
			WarehouseCount uint64 `json:"warehouse_count"`
		} `json:"mismatches"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("verify --json exited %d with unreadable JSON (%v):\n%s", code, err, out)
	}
	if rep.Variables != 9 || rep.Matched != 8 || len(rep.Mismatches) != 1 || rep.Mismatches[0].VariableID != v.ID ||
		rep.Mismatches[0].SourceCount != int64(n) || rep.Mismatches[0].WarehouseCount != uint64(n-1) {
		t.Fatalf("verify --json reports %+v; want 9 variables, 8 matched, %s at %d vs %d", rep, v.ID, n, n-1)
	}

	w.sim.ResetCounters()
	code, out, errs = verify("--repair")
	if code != 0 || !strings.Contains(out, "repair: re-extracted 1 variables") || !strings.Contains(out, "0 still mismatch") {
		t.Fatalf("verify --repair exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	if series := w.sim.Counters()["POST /api/v1.6/data/raw/series 200"]; series != 1 {
		t.Fatalf("the repair made %d raw-series requests, want 1 for the one variable", series)
	}
	if code, out, errs = verify(); code != 0 {
		t.Fatalf("verify after the repair exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	w.checkOracle()
}

// checkOracleCount is the number of points the warehouse should hold.
func (w *world) checkOracleCount() int { return len(w.expected()) }

// waitMutations waits until ClickHouse has applied every mutation of the
// world's database (ALTER ... DELETE runs in the background).
func (w *world) waitMutations() {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pending uint64
		if err := w.conn.QueryRow(context.Background(), "SELECT count() FROM system.mutations WHERE database = ? AND is_done = 0", w.db).Scan(&pending); err != nil {
			w.t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d mutations still pending after 30s", pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recordingSim serves a fleetsim and records the aggregation bodies; rewrite,
// when set, replaces the aggregation responses.
type recordingSim struct {
	sim     *fleetsim.Sim
	mu      sync.Mutex
	bodies  []map[string]any
	stats   []string
	rewrite func(body []byte) []byte
}

func (r *recordingSim) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	switch {
	case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/data/stats/aggregation/"):
		b, _ := io.ReadAll(req.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		rewrite := r.rewrite
		r.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(b))
		if rewrite == nil {
			r.sim.ServeHTTP(rw, req)
			return
		}
		rec := httptest.NewRecorder()
		r.sim.ServeHTTP(rec, req)
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(rec.Code)
		rw.Write(rewrite(rec.Body.Bytes()))
	case strings.Contains(req.URL.Path, "/statistics/"):
		r.mu.Lock()
		r.stats = append(r.stats, req.URL.Path)
		r.mu.Unlock()
		r.sim.ServeHTTP(rw, req)
	default:
		r.sim.ServeHTTP(rw, req)
	}
}

// simWarehouse is the warehouse as it would be after a perfect sync of sim,
// less the points in missing.
type simWarehouse struct {
	sim     *fleetsim.Sim
	missing map[string]int64
}

func (s simWarehouse) PointStats(_ context.Context, from, to int64) (map[string]clickhouse.Stats, error) {
	out := map[string]clickhouse.Stats{}
	for _, d := range s.sim.Devices() {
		for _, v := range d.Variables {
			var st clickhouse.Stats
			for _, p := range s.sim.Points(v.ID) {
				if p.TimestampMs < from || p.TimestampMs > to || s.missing[v.ID] == p.TimestampMs {
					continue
				}
				if st.Count == 0 {
					st.MinTs = p.TimestampMs
				}
				st.Count++
				st.Sum += p.Value
				st.MaxTs = p.TimestampMs
			}
			if st.Count > 0 {
				out[v.ID] = st
			}
		}
	}
	return out, nil
}

type verifyFixture struct {
	rec        *recordingSim
	v          *verifier
	vars       []pipeline.Variable
	start, end int64
}

func newVerifyFixture(t *testing.T, perRequest int) *verifyFixture {
	t.Helper()
	sim, err := fleetsim.New(fleetsim.Options{Seed: 3, Devices: 4, Variables: 4, Points: 120, Span: 3 * 24 * time.Hour, Tokens: []string{testToken}})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingSim{sim: sim}
	srv := httptest.NewServer(rec)
	t.Cleanup(func() { srv.Close(); sim.Close() })
	api, err := fleetapi.New(fleetapi.Config{BaseURL: srv.URL, Tokens: fleetapi.StaticToken(testToken), MaxElapsed: 5 * time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &verifyFixture{rec: rec, start: sim.RetentionFloor().Add(time.Hour).UnixMilli(), end: time.Now().UnixMilli()}
	for _, d := range sim.Devices() {
		for _, v := range d.Variables {
			f.vars = append(f.vars, pipeline.Variable{ID: v.ID, Label: v.Label, DeviceID: d.ID, DeviceLabel: d.Label})
		}
	}
	f.v = &verifier{src: api, wh: simWarehouse{sim: sim}, perRequest: perRequest, inFlight: 2, log: zap.NewNop()}
	return f
}

func TestVerifyAsksForAggregatesOfManyVariablesWithBothBoundsAndNoLimit(t *testing.T) {
	f := newVerifyFixture(t, 6)
	rep, err := f.v.verify(context.Background(), f.vars, f.start, f.end)
	if err != nil {
		t.Fatal(err)
	}
	// A variable without points in the range joins no row of the joined
	// frame, so it is read singly; every other one comes from the frame.
	empty := 0
	for _, v := range f.vars {
		if len(f.rec.sim.Points(v.ID)) == 0 {
			empty++
		}
	}
	if len(rep.Mismatches) != 0 || rep.Matched != 16 || rep.ViaAggregation != 16-empty || rep.ViaStatistics != empty {
		t.Fatalf("verify of a perfect warehouse (%d empty variables): %+v", empty, rep)
	}
	// 16 variables, 6 per request: 3 requests for count and 3 for sum.
	if len(f.rec.bodies) != 6 {
		t.Fatalf("%d aggregation requests, want 6", len(f.rec.bodies))
	}
	for _, b := range f.rec.bodies {
		if _, ok := b["limit"]; ok {
			t.Fatalf("an aggregation request sends a limit (it truncates the input): %v", b)
		}
		if b["start"] != float64(f.start) || b["end"] != float64(f.end) || b["join_dataframes"] != true {
			t.Fatalf("aggregation body %v; want both bounds %d..%d and join_dataframes true (columns name the variables)", b, f.start, f.end)
		}
	}
	// Only the probe variable and the empty ones are read singly (count and sum).
	if len(f.rec.stats) != 2+2*empty {
		t.Fatalf("%d single statistics requests, want %d for the probe and %d empty variables: %v", len(f.rec.stats), 2+2*empty, empty, f.rec.stats)
	}
}

func TestVerifyConfirmsAMismatchThroughTheSingleStatistics(t *testing.T) {
	f := newVerifyFixture(t, 50)
	victim := f.vars[5]
	pts := f.rec.sim.Points(victim.ID)
	f.v.wh = simWarehouse{sim: f.rec.sim, missing: map[string]int64{victim.ID: pts[len(pts)-1].TimestampMs}}
	rep, err := f.v.verify(context.Background(), f.vars, f.start, f.end)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Mismatches) != 1 || rep.Mismatches[0].VariableID != victim.ID || rep.Mismatches[0].Via != viaStatistics ||
		rep.Mismatches[0].SourceCount != int64(rep.Mismatches[0].WarehouseCount)+1 {
		t.Fatalf("mismatches %+v; want only %s, confirmed by the statistics endpoint, one point short", rep.Mismatches, victim.ID)
	}
}

func TestVerifyReadsSinglyWhenTheAggregationBodyIsNotAsExpected(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rewrite func([]byte) []byte
	}{
		{"unknown shape", func([]byte) []byte { return []byte(`{"data":{"frames":[]}}`) }},
		{"plausible shape, other numbers", func(b []byte) []byte {
			// Results that parse but mean something else (here: every
			// value doubled) must not turn into false mismatches.
			var body struct {
				Columns []string `json:"columns"`
				Results [][]any  `json:"results"`
			}
			if json.Unmarshal(b, &body) != nil {
				return b
			}
			for _, row := range body.Results {
				for j := 1; j < len(row); j++ {
					if v, ok := row[j].(float64); ok {
						row[j] = 2*v + 1
					}
				}
			}
			out, _ := json.Marshal(body)
			return out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newVerifyFixture(t, 5)
			f.rec.rewrite = tc.rewrite
			rep, err := f.v.verify(context.Background(), f.vars, f.start, f.end)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Mismatches) != 0 || rep.ViaStatistics != 16 {
				t.Fatalf("with an unexpected aggregation body: %d mismatches, %d variables read singly; want 0 and 16: %+v",
					len(rep.Mismatches), rep.ViaStatistics, rep.Mismatches)
			}
		})
	}
}

func TestSumsCompareWithARelativeToleranceAndCountsExactly(t *testing.T) {
	for _, tc := range []struct {
		s    sourceStat
		w    clickhouse.Stats
		want bool
	}{
		{sourceStat{count: 3, sum: 0.1 + 0.2 + 0.3}, clickhouse.Stats{Count: 3, Sum: 0.3 + 0.2 + 0.1}, true},
		{sourceStat{count: 3, sum: 6e12}, clickhouse.Stats{Count: 3, Sum: 6e12 + 1e-3}, true},
		{sourceStat{count: 3, sum: 6}, clickhouse.Stats{Count: 3, Sum: 6.001}, false},
		{sourceStat{count: 3, sum: 6}, clickhouse.Stats{Count: 2, Sum: 6}, false},
		{sourceStat{count: 0, sum: 0}, clickhouse.Stats{}, true},
	} {
		if got := agrees(tc.s, tc.w); got != tc.want {
			t.Errorf("agrees(%+v, %+v) = %v, want %v", tc.s, tc.w, got, tc.want)
		}
	}
	for _, tc := range []struct {
		v    float64
		ok   bool
		n    int64
		whol bool
	}{{5, true, 5, true}, {5.5, true, 0, false}, {-1, true, 0, false}, {0, false, 0, false}, {0, true, 0, true}} {
		if n, ok := wholeCount(tc.v, tc.ok); n != tc.n || ok != tc.whol {
			t.Errorf("wholeCount(%v, %v) = %d, %v; want %d, %v", tc.v, tc.ok, n, ok, tc.n, tc.whol)
		}
	}
}

func TestVerifyRejectsARangeOutsideRetentionAsUsage(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 1, Variables: 1, Points: 10, Span: time.Hour}})
	code, _, errs := w.cli(context.Background(), "verify", "--config", w.cfgPath, "--from", "2000-01-01T00:00:00Z", "--to", "2000-02-01T00:00:00Z")
	if code != 2 || !strings.Contains(lastLines(errs, 1), "retention window") {
		t.Fatalf("verify of a range before retention exited %d: %s", code, lastLines(errs, 1))
	}
}
