//go:build cluster

package clickhouse

import (
	"context"
	"testing"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// TestClusterTheAdversarialHourIsExactWhicheverPathWritesItsRow is
// rollup_sum_test.go's test on the cluster's Distributed tables, where
// each shard sends its partial sums to the server that asked: issue 35's
// hour (40,002 points, the oldest 2^60, the newest -2^60, the rest 127,
// loaded newest first) for one variable of each shard, its hourly row
// written by a cycle's Recompute, by Rebuild (`fleetsync rollup`) and by
// RepairRollups (`verify --repair`, of a row 64 off, as sumKahan alone
// sums it). Each time the sums are exactly 5,080,000 and the check finds
// no difference. (A sumKahan state sent between 18.16 servers breaks the
// native protocol, which is why hourlySum does without it.)
func TestClusterTheAdversarialHourIsExactWhicheverPathWritesItsRow(t *testing.T) {
	cl := chtest.Cluster(t)
	c := newClusterClient(t, cl, chtest.ClusterDatabase(t, cl), nil)
	ctx := context.Background()
	from, to := rollupHour, rollupHour+hourMs-1
	const n = 40_002
	var b pipeline.Batch
	var touched []analyst.Range
	var ids []string
	for shard := range cl.Nodes {
		id := variableOfShard(t, c, len(cl.Nodes), shard)
		ids = append(ids, id)
		for i := n - 1; i >= 0; i-- {
			v := 127.0
			switch i {
			case 0:
				v = 1 << 60
			case n - 1:
				v = -(1 << 60)
			}
			b.Append(pipeline.Row{VariableID: id, DeviceID: "dev", TsMs: rollupHour + int64(i)*50, Value: v, Context: "{}"})
		}
		touched = append(touched, analyst.Range{VariableID: id, FromMs: rollupHour, ToMs: rollupHour + (n-1)*50, Loaded: true})
	}
	if err := c.Write(ctx, []*pipeline.Batch{&b}); err != nil {
		t.Fatal(err)
	}
	check := func(path string) {
		t.Helper()
		for _, id := range ids {
			var (
				count uint64
				sum   float64
			)
			if err := c.Conn().QueryRow(ctx, "SELECT count, sum FROM "+c.Table(TableHourly)+" FINAL WHERE variable_id = ?", id).Scan(&count, &sum); err != nil {
				t.Fatalf("%s: read the hourly row of %s: %v", path, id, err)
			}
			if count != n || sum != 5_080_000 {
				t.Errorf("%s: hourly row of %s: count %d, sum %v; want %d and 5.08e+06", path, id, count, sum, n)
			}
		}
		rep, err := c.AnalystTables().CheckRollups(ctx, from, to)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(rep.Diffs) > 0 || rep.Hours != len(ids) || rep.Latest != len(ids) {
			t.Errorf("%s: the check compared %d hours and %d latest rows and found %+v; want %d, %d and no difference", path, rep.Hours, rep.Latest, rep.Diffs, len(ids), len(ids))
		}
	}
	if err := c.AnalystTables().Recompute(ctx, touched); err != nil {
		t.Fatal(err)
	}
	check("cycle")
	if k, err := c.AnalystTables().Rebuild(ctx, from, to); err != nil || k != len(ids) {
		t.Fatalf("Rebuild rebuilt %d variables (%v), want %d", k, err, len(ids))
	}
	check("rollup")
	hourly := c.Table(TableHourly)
	if err := c.Conn().Exec(ctx, "INSERT INTO "+hourly+" ("+hourlyColumns+c.cluster().keyColumn()+") SELECT variable_id, device_id, hour, count, sum + 64, min, max, first_value, last_value, first_ts_ms, last_ts_ms, version + 1"+
		c.cluster().keyColumn()+" FROM "+hourly+" FINAL"); err != nil {
		t.Fatal(err)
	}
	rep, err := c.AnalystTables().CheckRollups(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) != len(ids) {
		t.Fatalf("the check found %+v, want the hour of each of %v 64 off", rep.Diffs, ids)
	}
	if err := c.AnalystTables().RepairRollups(ctx, rep.Diffs); err != nil {
		t.Fatal(err)
	}
	check("verify --repair")
}
