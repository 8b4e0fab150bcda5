package main

// The harness's second half (harness_test.go has the world and how to run
// fleetsync in it): what the source holds and what it was asked, points
// added to it, what landed in the warehouse, and the oracle that compares
// the two, marks included.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/pipeline"
)

// counter sums fleetsim's counters whose key contains every one of subs.
func (w *world) counter(subs ...string) int {
	n := 0
next:
	for k, c := range w.sim.Counters() {
		for _, s := range subs {
			if !strings.Contains(k, s) {
				continue next
			}
		}
		n += c
	}
	return n
}

// dataRequests counts the API's data requests (raw series and counts).
func (w *world) dataRequests() int { return w.counter("/api/v1.6/") }

// rereadPhaseCame says whether the re-read phase of one of the fleet's
// variables came round in (from, to] under idle_recheck recheck and
// variables_per_request perRequest (pipeline.RecheckAt; one slot per
// perRequest variables, all in one chunk of one shard): a cycle ending
// after it re-reads that slot's variables, however soon after a complete
// cycle it runs.
func (w *world) rereadPhaseCame(from, to time.Time, recheck time.Duration, perRequest int) bool {
	var ids []string
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			ids = append(ids, v.ID)
		}
	}
	slots := (len(ids) + perRequest - 1) / perRequest
	for _, id := range ids {
		if pipeline.RecheckAt(id, recheck, slots, to.UnixMilli()) > from.UnixMilli() {
			return true
		}
	}
	return false
}

// allRequests counts every API request.
func (w *world) allRequests() int { return w.counter("/api/") }

// addNewPoints gives every variable of the source a new point, a few
// milliseconds before now, valued value plus the variable's index in its
// device; with late, every variable that had points also gets a late one,
// 20 minutes behind its newest (below its mark, inside the next cycle's
// lookback), valued -value. note, when set, is the points' context. It
// returns the new points' times by variable.
func (w *world) addNewPoints(value float64, late bool, note string) map[string]int64 {
	w.t.Helper()
	now := time.Now().UnixMilli()
	var ctx map[string]any
	if note != "" {
		ctx = map[string]any{"note": note}
	}
	added := map[string]int64{}
	for i, d := range w.sim.Devices() {
		for j, v := range d.Variables {
			pts := w.sim.Points(v.ID)
			ts := now - int64(10*i+j) - 10
			add := []fleetsim.SimPoint{{TimestampMs: ts, Value: value + float64(j), Context: ctx}}
			if late && len(pts) > 0 {
				add = append(add, fleetsim.SimPoint{TimestampMs: pts[len(pts)-1].TimestampMs - 20*60*1000 + int64(j), Value: -value, Context: ctx})
			}
			if err := w.sim.AddPoints(v.ID, add); err != nil {
				w.t.Fatal(err)
			}
			added[v.ID] = ts
		}
	}
	return added
}

// pointKey names a point: its variable and time.
type pointKey struct {
	variable string
	ts       int64
}

// pointVal is what the oracle compares of a point.
type pointVal struct {
	value   float64
	context map[string]any
}

// pointSet is the oracle's view of a set of points.
type pointSet map[pointKey]pointVal

// sourcePoints is every point the simulator holds now for the given
// variables (all when ids is nil), regardless of retention.
func (w *world) sourcePoints(ids map[string]bool) pointSet {
	out := pointSet{}
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			if ids != nil && !ids[v.ID] {
				continue
			}
			for _, p := range w.sim.Points(v.ID) {
				ctx := p.Context
				if ctx == nil {
					ctx = map[string]any{}
				}
				out[pointKey{v.ID, p.TimestampMs}] = pointVal{p.Value, normalize(ctx)}
			}
		}
	}
	return out
}

// floor is the oracle's retention floor: the account's, plus the safety
// margin fleetsync never reads into (and a minute for the test's own time).
func (w *world) floor() int64 {
	return time.Now().Add(-w.retention).Add(w.margin + time.Minute).UnixMilli()
}

// expected is every source point above the floor: what the warehouse
// must hold.
func (w *world) expected() pointSet {
	floor := w.floor()
	out := w.sourcePoints(nil)
	for k := range out {
		if k.ts < floor {
			delete(out, k)
		}
	}
	return out
}

// normalize is m as it reads back from JSON.
func normalize(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// loadedRow is a row of datapoints FINAL.
type loadedRow struct {
	pointVal
	deviceLabel, variableLabel string
	lat, lng                   *float64
}

// loaded reads datapoints FINAL and fails on a point there twice.
func (w *world) loaded() map[pointKey]loadedRow {
	w.t.Helper()
	rows, err := w.conn.Query(context.Background(), fmt.Sprintf(
		"SELECT variable_id, ts_ms, value, context, device_label, variable_label, lat, lng FROM `%s`.datapoints FINAL", w.db))
	if err != nil {
		if unknownTable(err) {
			return map[pointKey]loadedRow{}
		}
		w.t.Fatalf("query datapoints: %v", err)
	}
	defer rows.Close()
	out := map[pointKey]loadedRow{}
	for rows.Next() {
		var (
			id, ctx, dl, vl string
			ts              int64
			val             float64
			lat, lng        *float64
		)
		if err := rows.Scan(&id, &ts, &val, &ctx, &dl, &vl, &lat, &lng); err != nil {
			w.t.Fatalf("scan: %v", err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ctx), &m); err != nil {
			w.t.Fatalf("context of %s@%d is not JSON: %q", id, ts, ctx)
		}
		k := pointKey{id, ts}
		if _, dup := out[k]; dup {
			w.t.Fatalf("duplicate row under FINAL: %v", k)
		}
		out[k] = loadedRow{pointVal{val, m}, dl, vl, lat, lng}
	}
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	return out
}

// unknownTable tells ClickHouse's answer for a table or database not
// created yet (a process killed before its migration).
func unknownTable(err error) bool {
	var exc *clickhouse.Exception
	return errors.As(err, &exc) && (exc.Code == 60 || exc.Code == 81)
}

// checkOracle asserts the warehouse holds exactly the source's points above
// the floor, printing the first differences, and returns their number.
func (w *world) checkOracle() int {
	w.t.Helper()
	floor := w.floor()
	return w.checkLoadedBetween(floor, floor, math.MaxInt64, math.MaxInt64, nil)
}

// checkLoadedBetween is the oracle where the window's bounds are only known
// to lie in bands: every source point in [mustFrom, mustTo] is loaded exactly
// once with its value and context; every loaded point is a source point (or
// one of extra, points of objects deleted since) in [mayFrom, mayTo].
func (w *world) checkLoadedBetween(mayFrom, mustFrom, mustTo, mayTo int64, extra pointSet) int {
	w.t.Helper()
	src := w.sourcePoints(nil)
	for k, v := range extra {
		if _, ok := src[k]; !ok {
			src[k] = v
		}
	}
	got := w.loaded()
	var diffs []string
	want := 0
	for k, v := range src {
		if k.ts < mustFrom || k.ts > mustTo {
			continue
		}
		if _, isExtra := extra[k]; isExtra {
			continue
		}
		want++
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing %s@%d", k.variable, k.ts))
		case !samePoint(g.pointVal, v):
			diffs = append(diffs, fmt.Sprintf("%s@%d: got %v %v, want %v %v", k.variable, k.ts, g.value, g.context, v.value, v.context))
		}
	}
	for k, g := range got {
		v, ok := src[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("unexpected %s@%d (not in the source)", k.variable, k.ts))
		case k.ts < mayFrom || k.ts > mayTo:
			diffs = append(diffs, fmt.Sprintf("%s@%d loaded from outside [%d, %d]", k.variable, k.ts, mayFrom, mayTo))
		case !samePoint(g.pointVal, v):
			diffs = append(diffs, fmt.Sprintf("%s@%d: got %v %v, want %v %v", k.variable, k.ts, g.value, g.context, v.value, v.context))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		w.t.Fatalf("warehouse differs from the source in %d points (%d expected, %d loaded); first: %s", len(diffs), want, len(got), strings.Join(diffs[:min(8, len(diffs))], "; "))
	}
	return want
}

// samePoint compares a loaded point with the source's: the same value (NaN
// equal to NaN) and the same context.
func samePoint(got, want pointVal) bool {
	sameValue := got.value == want.value || math.IsNaN(got.value) && math.IsNaN(want.value)
	return sameValue && reflect.DeepEqual(got.context, want.context)
}

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
// that no mark moved backwards since prev; it returns the marks.
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

// count runs a count() query on the test's connection, $db standing for
// the world's database; a table not created yet counts 0.
func (w *world) count(query string) uint64 {
	w.t.Helper()
	var n uint64
	if err := w.conn.QueryRow(context.Background(), strings.ReplaceAll(query, "$db", "`"+w.db+"`")).Scan(&n); err != nil {
		if strings.Contains(err.Error(), "doesn't exist") {
			return 0
		}
		w.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// rawRows counts datapoints rows before deduplication: every insert adds.
func (w *world) rawRows() uint64 { return w.count("SELECT count() FROM $db.datapoints") }
