package clickhouse_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/rolluptest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// insertVersion inserts rows into datapoints in one INSERT, all with
// version, as a writer whose clock gave it that version does.
func insertVersion(t *testing.T, c *clickhouse.Client, version uint64, rows ...pipeline.Row) {
	t.Helper()
	ctx := context.Background()
	b, err := c.Conn().PrepareBatch(ctx, "INSERT INTO "+c.Table(clickhouse.TableDatapoints)+
		" (variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng, version)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Context == "" {
			r.Context = "{}"
		}
		if err := b.Append(r.VariableID, r.DeviceID, r.DeviceLabel, r.VariableLabel, r.TsMs, time.UnixMilli(r.TsMs).UTC(),
			r.Value, r.Context, (*float64)(nil), (*float64)(nil), version); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// hourlyRow reads the hourly row of id at hour h (ms) with FINAL.
func hourlyRow(t *testing.T, c *clickhouse.Client, id string, h int64) rolluptest.Hourly {
	t.Helper()
	var r rolluptest.Hourly
	if err := c.Conn().QueryRow(context.Background(), "SELECT variable_id, device_id, hour, count, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms FROM "+
		c.Table(clickhouse.TableHourly)+" FINAL WHERE variable_id = ? AND hour = toDateTime(?)", id, h/1000).
		Scan(&r.VariableID, &r.DeviceID, &r.Hour, &r.Count, &r.Sum, &r.Min, &r.Max, &r.FirstValue, &r.LastValue, &r.FirstTsMs, &r.LastTsMs); err != nil {
		t.Fatalf("the hourly row of %s at %s: %v", id, time.UnixMilli(h).UTC().Format(time.RFC3339), err)
	}
	r.Hour = r.Hour.UTC()
	return r
}

// latestValue reads the value and context of id's latest row with FINAL.
func latestValue(t *testing.T, c *clickhouse.Client, id string) (float64, string) {
	t.Helper()
	var (
		v   float64
		ctx string
	)
	if err := c.Conn().QueryRow(context.Background(), "SELECT value, context FROM "+c.Table(clickhouse.TableLatest)+" FINAL WHERE variable_id = ?", id).Scan(&v, &ctx); err != nil {
		t.Fatalf("the latest row of %s: %v", id, err)
	}
	return v, ctx
}

// checkNoDiffs runs verify's comparison over [from, to] and fails with its
// differences.
func checkNoDiffs(t *testing.T, c *clickhouse.Client, from, to int64) {
	t.Helper()
	rep, err := c.AnalystTables().CheckRollups(context.Background(), from, to)
	if err != nil {
		t.Fatalf("CheckRollups: %v", err)
	}
	if len(rep.Diffs) > 0 {
		t.Errorf("verify finds %d differences; the first: %+v", len(rep.Diffs), rep.Diffs[0])
	}
}

// Two versions of one point with different values: the rows must hold the
// greatest version's, as FINAL does, even when the older version is
// inserted last (a writer whose version was taken earlier, acknowledged
// later). A recompute that kept the row inserted last, or both rows, would
// hold the older values here.
func TestRecomputeKeepsTheGreatestVersionOfAPointWhenTheOlderLandsLast(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	older, newer := c.NextVersion(), c.NextVersion()
	row := func(ts int64, device string, v float64, ctx string) pipeline.Row {
		return pipeline.Row{VariableID: "v", DeviceID: device, DeviceLabel: "truck", VariableLabel: "speed", TsMs: ts, Value: v, Context: ctx}
	}
	// Hour 0: the contested point is the hour's last (its last value, its
	// device, its max); hour 1: its first; hour 2: the variable's newest.
	insertVersion(t, c, newer,
		row(base+10_000, "d", 1, ""), row(base+20_000, "d", 2, ""),
		row(base+hour+5_000, "d", 5, ""), row(base+hour+10_000, "d", 6, ""),
		row(base+2*hour, "d", 10, `{"read":"new"}`))
	insertVersion(t, c, older,
		row(base+20_000, "d-old", 1000, ""),
		row(base+hour+5_000, "d-old", -500, ""),
		row(base+2*hour, "d-old", 99, `{"read":"old"}`))
	recompute(t, c, []analyst.Range{{VariableID: "v", FromMs: base, ToMs: base + 2*hour, Loaded: true}})

	for _, want := range []rolluptest.Hourly{
		{DeviceID: "d", Hour: time.UnixMilli(base).UTC(), Count: 2, Sum: 3, Min: 1, Max: 2, FirstValue: 1, LastValue: 2, FirstTsMs: base + 10_000, LastTsMs: base + 20_000},
		{DeviceID: "d", Hour: time.UnixMilli(base + hour).UTC(), Count: 2, Sum: 11, Min: 5, Max: 6, FirstValue: 5, LastValue: 6, FirstTsMs: base + hour + 5_000, LastTsMs: base + hour + 10_000},
		{DeviceID: "d", Hour: time.UnixMilli(base + 2*hour).UTC(), Count: 1, Sum: 10, Min: 10, Max: 10, FirstValue: 10, LastValue: 10, FirstTsMs: base + 2*hour, LastTsMs: base + 2*hour},
	} {
		want.VariableID = "v"
		if got := hourlyRow(t, c, "v", want.Hour.UnixMilli()); got != want {
			t.Errorf("hourly row at %s:\n   got  %+v\n   want %+v (the newer version's values)", want.Hour.Format(time.RFC3339), got, want)
		}
	}
	if v, ctx := latestValue(t, c, "v"); v != 10 || ctx != `{"read":"new"}` {
		t.Errorf("latest of v = %v %s, want the newer version's 10 {\"read\":\"new\"}", v, ctx)
	}
	rolluptest.Check(t, c)
	checkNoDiffs(t, c, base, base+2*hour)
}

// The same with NaN and infinite values, which make a sum NaN or infinite
// as a plain sum does: a wrong pick shows as a NaN sum where +Inf is due,
// and a finite one where NaN is.
func TestRecomputeKeepsTheGreatestVersionOfANaNOrInfinitePoint(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	older, newer := c.NextVersion(), c.NextVersion()
	row := func(ts int64, v float64) pipeline.Row {
		return pipeline.Row{VariableID: "x", DeviceID: "d", TsMs: ts, Value: v}
	}
	insertVersion(t, c, newer, row(base+10_000, 1), row(base+20_000, math.Inf(1)), row(base+hour, math.NaN()))
	insertVersion(t, c, older, row(base+20_000, math.NaN()), row(base+hour, 4))
	recompute(t, c, []analyst.Range{{VariableID: "x", FromMs: base, ToMs: base + hour, Loaded: true}})

	if h := hourlyRow(t, c, "x", base); h.Count != 2 || !math.IsInf(h.Sum, 1) || !math.IsInf(h.LastValue, 1) || h.FirstValue != 1 {
		t.Errorf("hourly row of the first hour: %+v, want count 2, sum and last value +Inf, first value 1", h)
	}
	if h := hourlyRow(t, c, "x", base+hour); h.Count != 1 || !math.IsNaN(h.Sum) || !math.IsNaN(h.LastValue) {
		t.Errorf("hourly row of the second hour: %+v, want count 1, sum and last value NaN", h)
	}
	if v, _ := latestValue(t, c, "x"); !math.IsNaN(v) {
		t.Errorf("latest of x = %v, want the newer version's NaN", v)
	}
	checkNoDiffs(t, c, base, base+hour)
}

// One INSERT holding a point twice (a request read again into the same
// streamed INSERT) gives two rows of one version: the hourly row counts the
// one FINAL keeps, once. The point is not the variable's newest, whose
// latest row is read without FINAL (see latestAggregate).
func TestRecomputeCountsOnceTheCopyFinalKeepsOfAPointHeldTwiceByOneInsert(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	row := func(ts int64, v float64) pipeline.Row {
		return pipeline.Row{VariableID: "t", DeviceID: "d", TsMs: ts, Value: v}
	}
	insertVersion(t, c, c.NextVersion(), row(base+10_000, 1), row(base+20_000, 2), row(base+20_000, 3), row(base+hour, 4))
	recompute(t, c, []analyst.Range{{VariableID: "t", FromMs: base, ToMs: base + hour, Loaded: true}})
	var kept float64
	if err := c.Conn().QueryRow(context.Background(), "SELECT value FROM "+c.Table(clickhouse.TableDatapoints)+" FINAL WHERE variable_id = 't' AND ts_ms = ?", base+20_000).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if h := hourlyRow(t, c, "t", base); h.Count != 2 || h.Sum != 1+kept || h.LastValue != kept || h.Max != kept {
		t.Errorf("hourly row: %+v, want count 2, sum %v, last and max %v (FINAL keeps %v)", h, 1+kept, kept, kept)
	}
	rolluptest.Check(t, c)
	checkNoDiffs(t, c, base, base+hour)
}
