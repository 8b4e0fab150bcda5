package clickhouse_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/rolluptest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// aggregated is tr with the aggregates of rows (one variable's, each
// timestamp once), computed here the plain way: what the engine hands
// Recompute for rows it loaded once each.
func aggregated(tr pipeline.Touched, rows []pipeline.Row) pipeline.Touched {
	byHour := map[int64][]pipeline.Row{}
	for _, r := range rows {
		byHour[r.TsMs/hour*hour] = append(byHour[r.TsMs/hour*hour], r)
	}
	a := &pipeline.Aggregates{Rows: int64(len(rows))}
	for h, rs := range byHour {
		slices.SortFunc(rs, func(x, y pipeline.Row) int { return int(x.TsMs - y.TsMs) })
		ha := pipeline.HourAgg{Hour: int32(h / hour), Count: uint32(len(rs)), Min: math.Inf(1), Max: math.Inf(-1),
			FirstValue: rs[0].Value, LastValue: rs[len(rs)-1].Value, FirstMs: uint32(rs[0].TsMs - h), LastMs: uint32(rs[len(rs)-1].TsMs - h)}
		for _, r := range rs {
			ha.Sum += r.Value
			ha.Min, ha.Max = math.Min(ha.Min, r.Value), math.Max(ha.Max, r.Value)
		}
		a.Hours = append(a.Hours, ha)
		if last := rs[len(rs)-1]; last.TsMs > a.Latest.TsMs {
			a.Latest = last
			if a.Latest.Context == "" {
				a.Latest.Context = "{}"
			}
		}
	}
	slices.SortFunc(a.Hours, func(x, y pipeline.HourAgg) int { return int(x.Hour - y.Hour) })
	tr.Agg = a
	return tr
}

// Aggregates handed by the engine are written as they are only where the
// table holds exactly their rows; every other variable is recomputed, and
// both tables stay exact either way. Aggregates marked First are counted
// over all of their variable's rows, so a row before their first hour
// also sends the variable to the recompute; the others are counted from
// that hour on.
func TestRollupsFromLoadedAggregatesAreWrittenOnlyWhereTheTableProvesThem(t *testing.T) {
	for _, first := range []bool{false, true} {
		name := "counted from the first hour"
		if first {
			name = "counted whole (first load)"
		}
		t.Run(name, func(t *testing.T) { testRollupsFromLoaded(t, first) })
	}
}

func testRollupsFromLoaded(t *testing.T, first bool) {
	c := clickhouse.OpenTestClient(t)
	series := func(id, dev string, from int64, n int, step int64, withPos bool) []pipeline.Row {
		var out []pipeline.Row
		for i := range n {
			r := pipeline.Row{VariableID: id, DeviceID: dev, DeviceLabel: "dev-" + dev, VariableLabel: "label-" + id,
				TsMs: from + int64(i)*step, Value: float64((i*7)%13) - 2.25, Context: "{}"}
			if withPos {
				r.Context, r.Lat, r.Lng, r.HasLat, r.HasLng = `{"lat":1.5,"lng":-2.5}`, 1.5, -2.5, true, true
			}
			out = append(out, r)
		}
		return out
	}
	// Already in the table before the pass: an older point in the first
	// hour "older" will load into, a newer point than "newer" will load,
	// and every point "reread" will load again.
	reread := series("reread", "d3", base, 120, 61_000, false)
	// "earlier" has a point two hours before the hours it will load: only a
	// count of all its rows sees it, and it does not change those hours.
	prior := []pipeline.Row{
		{VariableID: "older", DeviceID: "d2", DeviceLabel: "dev-d2", VariableLabel: "label-older", TsMs: base + 10, Value: 99, Context: "{}"},
		{VariableID: "newer", DeviceID: "d4", DeviceLabel: "dev-d4", VariableLabel: "label-newer", TsMs: base + 9*hour, Value: -7, Context: "{}"},
		{VariableID: "earlier", DeviceID: "d5", DeviceLabel: "dev-d5", VariableLabel: "label-earlier", TsMs: base - 2*hour, Value: 3, Context: "{}"},
	}
	recompute(t, c, write(t, c, append(prior, reread...)...))

	fresh := series("fresh", "d1", base+5, 200, 59_000, true)
	older := series("older", "d2", base+20, 150, 60_000, false)
	newer := series("newer", "d4", base, 100, 60_000, false)
	earlier := series("earlier", "d5", base, 90, 60_000, false)
	var all []pipeline.Row
	for _, s := range [][]pipeline.Row{fresh, older, newer, reread, earlier} {
		all = append(all, s...)
	}
	touched := write(t, c, all...)
	byID := map[string][]pipeline.Row{"fresh": fresh, "older": older, "newer": newer, "reread": reread, "earlier": earlier}
	for i, tr := range touched {
		touched[i] = aggregated(tr, byID[tr.VariableID])
		touched[i].Agg.First = first
	}
	loaded0, recomputed0 := clickhouse.RollupPaths(t, c)
	recompute(t, c, touched)
	loaded, recomputed := clickhouse.RollupPaths(t, c)
	wantLoaded, wantRecomputed, want := 2.0, 3.0, "2 (fresh, earlier) and 3 (older, newer, reread)"
	if first {
		wantLoaded, wantRecomputed, want = 1, 4, "1 (fresh) and 4 (older, newer, reread, earlier)"
	}
	if loaded-loaded0 != wantLoaded || recomputed-recomputed0 != wantRecomputed {
		t.Errorf("written from the loaded aggregates %v, recomputed %v; want %s", loaded-loaded0, recomputed-recomputed0, want)
	}
	if h, l := rolluptest.Check(t, c); h < 10 || l != 5 {
		t.Errorf("compared %d hourly and %d latest rows, want at least 10 and 5", h, l)
	}

	// The check is what keeps them exact: aggregates that disagree with the
	// table (here, a point the pass did not load) are never written.
	late := pipeline.Row{VariableID: "fresh", DeviceID: "d1", DeviceLabel: "dev-d1", VariableLabel: "label-fresh", TsMs: base + 7, Value: 1e6, Context: "{}"}
	write(t, c, late)
	stale := aggregated(touched[0], fresh) // says nothing of the late point
	stale.Agg.First = first
	if stale.VariableID != "fresh" {
		t.Fatalf("touched[0] is %s, want fresh", stale.VariableID)
	}
	recompute(t, c, []pipeline.Touched{stale})
	if l2, _ := clickhouse.RollupPaths(t, c); l2 != loaded {
		t.Errorf("aggregates that miss a point of the table were written")
	}
	rolluptest.Check(t, c)
}

// A pass's last commit hands its variables to Recompute in two halves side
// by side (pipeline.splitHours): each half's count and INSERTs run beside
// the other's, and both tables stay exact, every variable written from its
// aggregates.
func TestRecomputeOfDisjointHalvesSideBySideIsExact(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	byID := map[string][]pipeline.Row{}
	var all []pipeline.Row
	for v := range 12 {
		id := fmt.Sprintf("half%02d", v)
		for i := range int64(300) {
			r := pipeline.Row{VariableID: id, DeviceID: "d", DeviceLabel: "dev", VariableLabel: id, TsMs: base + i*997_000 + int64(v), Value: float64(v*1000) + float64(i%37), Context: "{}"}
			byID[id] = append(byID[id], r)
			all = append(all, r)
		}
	}
	touched := write(t, c, all...)
	for i, tr := range touched {
		touched[i] = aggregated(tr, byID[tr.VariableID])
		touched[i].Agg.First = true
	}
	loaded0, recomputed0 := clickhouse.RollupPaths(t, c)
	errs := make(chan error, 2)
	for _, half := range [][]pipeline.Touched{touched[:6], touched[6:]} {
		go func() { errs <- c.Recompute(context.Background(), half) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Recompute: %v", err)
		}
	}
	if loaded, recomputed := clickhouse.RollupPaths(t, c); loaded-loaded0 != 12 || recomputed != recomputed0 {
		t.Errorf("written from the loaded aggregates %v, recomputed %v; want all 12 from the aggregates", loaded-loaded0, recomputed-recomputed0)
	}
	if h, l := rolluptest.Check(t, c); h < 12*80 || l != 12 {
		t.Errorf("compared %d hourly and %d latest rows, want at least %d and 12", h, l, 12*80)
	}
}
