package clickhouse_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// adversarialHour is issue 35's hour of 40,002 points of one variable, in
// time order: the oldest 2^60, the newest -2^60, the rest 127. Its sum is
// 40,000 × 127 = 5,080,000; a plain sum in time order gives 0 (every 127
// is below half an ulp of 2^60), and ClickHouse 18.16's sumKahan 5,080,064
// in either order.
func adversarialHour() []pipeline.Row {
	const n = 40_002
	rows := make([]pipeline.Row, n)
	for i := range rows {
		v := 127.0
		switch i {
		case 0:
			v = 1 << 60
		case n - 1:
			v = -(1 << 60)
		}
		rows[i] = pipeline.Row{VariableID: "v", DeviceID: "d", DeviceLabel: "dev", VariableLabel: "x",
			TsMs: base + int64(i)*50, Value: v, Context: "{}"}
	}
	return rows
}

const adversarialSum = 5_080_000

// hourSource serves rows, all of variable "v", as the points of one
// frame a request: newest first when newestFirst (as the service does),
// oldest first otherwise.
func hourSource(rows []pipeline.Row, newestFirst bool) *pipelinetest.Source {
	src := &pipelinetest.Source{Cut: pipelinetest.CutNewestAsc}
	if newestFirst {
		src.Cut = pipelinetest.CutNewestDesc
	}
	pts := make([]pipeline.Point, len(rows))
	for i, r := range rows {
		pts[i] = pipeline.Point{TsMs: r.TsMs, Value: r.Value, Context: []byte(r.Context)}
	}
	src.Add("v", pts...)
	return src
}

// TestTheAdversarialHourIsExactWhicheverPathWritesItsRow loads issue 35's
// hour, newest first as the service sends it and oldest first, and writes
// its hourly row by each path that writes one: a cycle (the engine's
// streamed INSERTs, then the Recompute its commit runs), `fleetsync
// rollup` (Rebuild) and `verify --repair` (RepairRollups of a row summed
// by sumKahan alone, which verify must report). Each time the stored sum is exactly 5,080,000 and verify's check
// (CheckRollups, recomputing the same aggregates over datapoints FINAL)
// finds no difference.
func TestTheAdversarialHourIsExactWhicheverPathWritesItsRow(t *testing.T) {
	for _, order := range []string{"newest first", "oldest first"} {
		rows := adversarialHour()
		if order == "newest first" {
			slices.Reverse(rows)
		}
		for _, path := range []struct {
			name  string
			write func(t *testing.T, c *clickhouse.Client)
		}{
			{"cycle", func(t *testing.T, c *clickhouse.Client) {
				target := []pipeline.Target{{Variable: pipeline.Variable{ID: "v", DeviceID: "d"}, Start: base, End: base + hour - 1, From: base}}
				res := pipeline.NewEngine(hourSource(rows, order == "newest first"), c.Points(), nil, pipeline.EngineOptions{RowsPerRequest: 100_000, Links: []pipeline.Link{analyst.Link(c.AnalystTables())}}, nil, nil, nil).
					Run(context.Background(), target)
				if len(res.Failed) > 0 || res.CommitErr != nil || res.Points != int64(len(rows)) {
					t.Fatalf("cycle: %d points, failed %v, commit %v", res.Points, res.Failed, res.CommitErr)
				}
			}},
			{"rollup", func(t *testing.T, c *clickhouse.Client) {
				write(t, c, rows...)
				if n, err := c.AnalystTables().Rebuild(context.Background(), base, base+hour-1); err != nil || n != 1 {
					t.Fatalf("Rebuild: %d variables, %v", n, err)
				}
			}},
			{"verify --repair", func(t *testing.T, c *clickhouse.Client) {
				write(t, c, rows...)
				// The row as sumKahan alone sums it, 64 off: verify must see it.
				if err := c.Conn().Exec(context.Background(), "INSERT INTO "+c.Table(clickhouse.TableHourly)+
					" (variable_id, device_id, hour, count, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms, version)"+
					" SELECT variable_id, any(device_id), toStartOfHour(ts) AS hour, count(), sumKahan(value), min(value), max(value),"+
					" argMin(value, ts_ms), argMax(value, ts_ms), min(ts_ms), max(ts_ms), 1 FROM "+c.Table(clickhouse.TableDatapoints)+
					" FINAL GROUP BY variable_id, hour"); err != nil {
					t.Fatal(err)
				}
				rep, err := c.AnalystTables().CheckRollups(context.Background(), base, base+hour-1)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Diffs) != 2 || rep.Diffs[0].Table != clickhouse.TableHourly || rep.Diffs[0].Problem != "sum 5.080064e+06 want 5.08e+06" {
					t.Fatalf("before the repair verify reports %+v, want the hourly row's sum and the missing latest row", rep.Diffs)
				}
				if err := c.AnalystTables().RepairRollups(context.Background(), rep.Diffs); err != nil {
					t.Fatal(err)
				}
			}},
		} {
			t.Run(fmt.Sprintf("%s, %s", path.name, order), func(t *testing.T) {
				c := clickhouse.OpenTestClient(t)
				path.write(t, c)
				checkAdversarialHour(t, c)
			})
		}
	}
}

// checkAdversarialHour fails t unless the hourly row of the adversarial
// hour holds its exact sum and verify finds no difference.
func checkAdversarialHour(t *testing.T, c *clickhouse.Client) {
	t.Helper()
	ctx := context.Background()
	var (
		count uint64
		sum   float64
	)
	if err := c.Conn().QueryRow(ctx, "SELECT count, sum FROM "+c.Table(clickhouse.TableHourly)+" FINAL WHERE variable_id = 'v'").Scan(&count, &sum); err != nil {
		t.Fatalf("read the hourly row: %v", err)
	}
	if count != 40_002 || sum != adversarialSum {
		t.Errorf("hourly row: count %d, sum %v; want 40002 and %v", count, sum, float64(adversarialSum))
	}
	rep, err := c.AnalystTables().CheckRollups(ctx, base, base+hour-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) > 0 || rep.Hours != 1 || rep.Latest != 1 {
		t.Errorf("verify compared %d hours and %d latest rows and reports %+v; want 1, 1 and no difference", rep.Hours, rep.Latest, rep.Diffs)
	}
}
