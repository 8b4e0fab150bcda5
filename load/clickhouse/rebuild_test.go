package clickhouse_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/rolluptest"
	"github.com/fleetsync/fleetsync/pipeline"
)

func rebuild(t *testing.T, c *clickhouse.Client, from, to int64) int {
	t.Helper()
	n, err := c.AnalystTables().Rebuild(context.Background(), from, to)
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	return n
}

// `fleetsync rollup` over a range gives every variable with a point in it
// its latest row, wherever its newest point lies: before the range's last
// hour (a variable silent for an hour, with --to now), or after the range.
func TestRebuildGivesEveryVariableWithAPointInTheRangeItsLatestRow(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	write(t, c,
		pipeline.Row{VariableID: "early", DeviceID: "d", DeviceLabel: "truck", VariableLabel: "speed", TsMs: base + 10, Value: 1},
		pipeline.Row{VariableID: "after", DeviceID: "d", DeviceLabel: "truck", VariableLabel: "temp", TsMs: base + 20, Value: 2},
		pipeline.Row{VariableID: "after", DeviceID: "d", DeviceLabel: "truck", VariableLabel: "temp", TsMs: base + 5*hour, Value: 3})
	if n := rebuild(t, c, base-hour, base+3*hour); n != 2 {
		t.Errorf("rebuilt %d variables, want 2", n)
	}
	for id, want := range map[string]int64{"early": base + 10, "after": base + 5*hour} {
		var ts int64
		if err := c.Conn().QueryRow(context.Background(), "SELECT ts_ms FROM "+c.Table(clickhouse.TableLatest)+" FINAL WHERE variable_id = ?", id).Scan(&ts); err != nil {
			t.Fatalf("the latest row of %s: %v", id, err)
		}
		if ts != want {
			t.Errorf("the latest row of %s is at %d, want its newest point %d", id, ts, want)
		}
	}
	// The hour after the range, rebuilt on its own, completes both tables.
	rebuild(t, c, base+5*hour, base+5*hour)
	if _, l := rolluptest.Check(t, c); l != 2 {
		t.Errorf("compared %d latest rows, want 2", l)
	}
}

// deletePoints deletes datapoints rows by hand, as the documented repair
// does, and waits for the mutation.
func deletePoints(t *testing.T, c *clickhouse.Client, where string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Conn().Exec(ctx, "ALTER TABLE "+c.Table(clickhouse.TableDatapoints)+" DELETE WHERE "+where); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var running uint64
		if err := c.Conn().QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = ? AND is_done = 0",
			c.Database(), clickhouse.TableDatapoints).Scan(&running); err != nil {
			t.Fatal(err)
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DELETE mutation is not done after a minute")
		}
	}
}

// After points are deleted from datapoints by hand, a rebuild over their
// range leaves no hour counting them (an emptied hour has count 0, which
// the README's queries skip) and a latest row that is the newest point
// left.
func TestRebuildReflectsPointsDeletedByHand(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	var rows []pipeline.Row
	for i := int64(0); i < 30; i++ {
		for _, id := range []string{"v1", "v2"} {
			rows = append(rows, pipeline.Row{VariableID: id, DeviceID: "d", DeviceLabel: "truck", VariableLabel: id, TsMs: base + i*6*60_000, Value: float64(i)})
		}
	}
	recompute(t, c, write(t, c, rows...))
	rolluptest.Check(t, c)
	// v1 loses its second and third hours (and with them its newest
	// point), v2 its newest point alone.
	deletePoints(t, c, "(variable_id = 'v1' AND ts_ms >= "+strconv.FormatInt(base+hour, 10)+") OR (variable_id = 'v2' AND ts_ms = "+strconv.FormatInt(base+29*6*60_000, 10)+")")
	rebuild(t, c, base, base+3*hour)
	h, l := rolluptest.Check(t, c)
	if h != 4 || l != 2 {
		t.Errorf("compared %d hourly and %d latest rows, want 4 and 2", h, l)
	}
	var zero uint64
	if err := c.Conn().QueryRow(context.Background(), "SELECT count() FROM (SELECT count FROM "+c.Table(clickhouse.TableHourly)+
		" FINAL WHERE variable_id = 'v1') WHERE count = 0").Scan(&zero); err != nil {
		t.Fatal(err)
	}
	if zero != 2 {
		t.Errorf("v1 has %d hourly rows with count 0 under FINAL, want 2 (its emptied hours)", zero)
	}
}
