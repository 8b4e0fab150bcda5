package clickhouse_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/rolluptest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// base is the start of an hour, in ms.
const base = int64(1699999200000)

const hour = int64(3600 * 1000)

// write loads rows and returns, per variable, the range they cover, as the
// engine hands it to Recompute.
func write(t *testing.T, c *clickhouse.Client, rows ...pipeline.Row) []analyst.Range {
	t.Helper()
	var b pipeline.Batch
	byID := map[string]*analyst.Range{}
	var order []string
	for _, r := range rows {
		if r.Context == "" {
			r.Context = "{}"
		}
		b.Append(r)
		tr, ok := byID[r.VariableID]
		if !ok {
			tr = &analyst.Range{VariableID: r.VariableID, FromMs: r.TsMs, ToMs: r.TsMs, Loaded: true}
			byID[r.VariableID] = tr
			order = append(order, r.VariableID)
		}
		tr.FromMs, tr.ToMs = min(tr.FromMs, r.TsMs), max(tr.ToMs, r.TsMs)
	}
	if err := c.Write(context.Background(), []*pipeline.Batch{&b}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	out := make([]analyst.Range, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	return out
}

func recompute(t *testing.T, c *clickhouse.Client, touched []analyst.Range) {
	t.Helper()
	if err := c.AnalystTables().Recompute(context.Background(), touched); err != nil {
		t.Fatalf("Recompute: %v", err)
	}
}

func TestRecomputeKeepsRollupsExactThroughRereadsAndLatePoints(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	var rows []pipeline.Row
	for i := int64(0); i < 300; i++ {
		ts := base + i*37*1000 // about three hours
		rows = append(rows,
			pipeline.Row{VariableID: "v1", DeviceID: "d1", DeviceLabel: "truck", VariableLabel: "speed", TsMs: ts, Value: float64(i%17) - 3.5},
			pipeline.Row{VariableID: "it's", DeviceID: "d2", DeviceLabel: "van", VariableLabel: "pos", TsMs: ts + 5, Value: float64(i) * 0.1,
				Context: `{"lat":1.5,"lng":2.5}`, Lat: 1.5, Lng: 2.5, HasLat: true, HasLng: true})
	}
	// The newest point of "it's" has no position: its latest row must say
	// NULL, not the position of an older point.
	rows = append(rows, pipeline.Row{VariableID: "it's", DeviceID: "d2", DeviceLabel: "van", VariableLabel: "pos", TsMs: base + 4*hour, Value: 9})
	recompute(t, c, write(t, c, rows...))
	h, l := rolluptest.Check(t, c)
	if h < 8 || l != 2 {
		t.Errorf("compared %d hourly and %d latest rows, want at least 8 and 2", h, l)
	}

	// A re-read that changes values, and a late point into the first hour
	// for v1; only the hours they touch are recomputed.
	again := write(t, c,
		pipeline.Row{VariableID: "v1", DeviceID: "d1", DeviceLabel: "truck", VariableLabel: "speed", TsMs: base + 37*1000, Value: 1000},
		pipeline.Row{VariableID: "v1", DeviceID: "d1", DeviceLabel: "truck", VariableLabel: "speed", TsMs: base + 1, Value: -1000})
	recompute(t, c, again)
	rolluptest.Check(t, c)

	// A late point is never the latest unless it is the newest.
	late := write(t, c, pipeline.Row{VariableID: "it's", DeviceID: "d2", DeviceLabel: "van", VariableLabel: "pos", TsMs: base + 2*hour + 1, Value: 77})
	recompute(t, c, late)
	rolluptest.Check(t, c)
	var ts int64
	if err := c.Conn().QueryRow(context.Background(), "SELECT ts_ms FROM "+c.Table(clickhouse.TableLatest)+" FINAL WHERE variable_id = 'it''s'").Scan(&ts); err != nil {
		t.Fatal(err)
	}
	if ts != base+4*hour {
		t.Errorf("latest ts_ms of it's = %d after a late point, want the newest %d", ts, base+4*hour)
	}
}

// TestRecomputeThatSawTheChangeWinsWhateverOrderTheyLand is the version
// argument of rollup.go: a recompute whose version was taken before a load
// (so its snapshot may not include it) loses to the one after the load,
// even when its row lands last.
func TestRecomputeThatSawTheChangeWinsWhateverOrderTheyLand(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	ctx := context.Background()
	recompute(t, c, write(t, c, pipeline.Row{VariableID: "v", DeviceID: "d", TsMs: base + 10, Value: 1}))
	stale := c.NextVersion() // a recompute starting now sees one point
	recompute(t, c, write(t, c, pipeline.Row{VariableID: "v", DeviceID: "d", TsMs: base + 20, Value: 2}))
	// The stale recompute's rows land after the fresh ones.
	b, err := c.Conn().PrepareBatch(ctx, "INSERT INTO "+c.Table(clickhouse.TableHourly)+" (variable_id, device_id, hour, count, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms, version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append("v", "d", time.UnixMilli(base).UTC(), uint64(1), 1.0, 1.0, 1.0, 1.0, 1.0, base+10, base+10, stale); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	lb, err := c.Conn().PrepareBatch(ctx, "INSERT INTO "+c.Table(clickhouse.TableLatest)+" (variable_id, device_id, ts_ms, ts, value, context, version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Append("v", "d", base+10, time.UnixMilli(base+10).UTC(), 1.0, "{}", stale); err != nil {
		t.Fatal(err)
	}
	if err := lb.Send(); err != nil {
		t.Fatal(err)
	}
	rolluptest.Check(t, c)
}

// Racing recomputes of the same hours (two overlapping cycles) leave the
// exact rows.
func TestConcurrentRecomputesLeaveExactRows(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	var rows []pipeline.Row
	for i := int64(0); i < 2000; i++ {
		rows = append(rows, pipeline.Row{VariableID: "v" + string(rune('a'+i%7)), DeviceID: "d", TsMs: base + i*7919, Value: float64(i)})
	}
	touched := write(t, c, rows...)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- c.AnalystTables().Recompute(context.Background(), touched) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Recompute: %v", err)
		}
	}
	rolluptest.Check(t, c)
}

// TestLatestIsTheNewestVersionOfAReReadNewestPoint: the latest row is read
// without FINAL, so it must pick, among the versions of the newest point,
// the one FINAL keeps (the greatest version), whatever order the parts are
// read in.
func TestLatestIsTheNewestVersionOfAReReadNewestPoint(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	newest := base + 2*hour
	point := func(v float64, ctx string) pipeline.Row {
		return pipeline.Row{VariableID: "v1", DeviceID: "d1", DeviceLabel: "truck", VariableLabel: "speed", TsMs: newest, Value: v, Context: ctx}
	}
	recompute(t, c, write(t, c,
		pipeline.Row{VariableID: "v1", DeviceID: "d1", DeviceLabel: "truck", VariableLabel: "speed", TsMs: newest - 1000, Value: 1},
		point(2, `{"read":1}`)))
	for i := range 3 {
		recompute(t, c, write(t, c, point(float64(10+i), fmt.Sprintf(`{"read":%d}`, i+2))))
	}
	rolluptest.Check(t, c)
	var (
		value float64
		ctx   string
	)
	if err := c.Conn().QueryRow(context.Background(), "SELECT value, context FROM "+c.Table(clickhouse.TableLatest)+" FINAL WHERE variable_id = 'v1'").Scan(&value, &ctx); err != nil {
		t.Fatal(err)
	}
	if value != 12 || ctx != `{"read":4}` {
		t.Errorf("latest of v1 = %v %s, want the last re-read's 12 {\"read\":4}", value, ctx)
	}
}
