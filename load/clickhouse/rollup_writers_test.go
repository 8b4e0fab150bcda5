package clickhouse_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/rolluptest"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// rollupAfter runs first, once, before handing the ranges to the real
// Rollup: what another writer does between this pass's load and its hook.
type rollupAfter struct {
	first func()
	r     analyst.Tables
}

func (r *rollupAfter) Recompute(ctx context.Context, touched []analyst.Range) error {
	if r.first != nil {
		r.first()
		r.first = nil
	}
	return r.r.Recompute(ctx, touched)
}

// Issue 24, case 3: two writers load the same points with other values (a
// backfill beside a cycle, two shard counts during a change), and a merge
// collapses the versions before the first writer's rollup. The tables
// must hold what FINAL holds, the second writer's values, whichever
// writer's rollup runs last. The old loaded path wrote the first writer's
// own aggregates there, its count of keys matching after the merge.
//
// The second writer is the same client (a second pass of the process) or
// another one (another process).
func TestAWritersRollupAfterAnotherWritersValuesHoldsTheValuesFinalKeeps(t *testing.T) {
	for _, same := range []bool{true, false} {
		t.Run(fmt.Sprint("same client ", same), func(t *testing.T) { writersAfterAnother(t, same) })
	}
}

func writersAfterAnother(t *testing.T, same bool) {
	c := clickhouse.OpenTestClient(t)
	second := c
	if !same {
		second = clickhouse.OpenTestClientOn(t, c.Database())
	}
	ctx := context.Background()
	ts := []int64{base + 1000, base + 2000, base + hour + 5000}
	target := []pipeline.Target{{Variable: pipeline.Variable{ID: "v", DeviceID: "d"}, Start: base, End: base + 2*hour, From: base}}
	run := func(value float64, w *clickhouse.Client, r analyst.Tables) {
		t.Helper()
		src := &pipelinetest.Source{}
		for _, at := range ts {
			src.Add("v", pipeline.Point{TsMs: at, Value: value, Context: []byte("{}")})
		}
		res := pipeline.NewEngine(src, w.Points(), nil, pipeline.EngineOptions{Links: []pipeline.Link{analyst.Link(r)}}, nil, nil, nil).Run(ctx, target)
		if len(res.Failed) > 0 || res.CommitErr != nil || res.Points != int64(len(ts)) {
			t.Fatalf("pass with value %v: %d points, failed %v, commit %v", value, res.Points, res.Failed, res.CommitErr)
		}
	}
	run(1, c, &rollupAfter{r: c.AnalystTables(), first: func() {
		run(2, second, second.AnalystTables())
		if err := c.Conn().Exec(ctx, "OPTIMIZE TABLE "+c.Table(clickhouse.TableDatapoints)+" FINAL"); err != nil {
			t.Fatal(err)
		}
	}})
	rolluptest.Check(t, c)
	var sum float64
	if err := c.Conn().QueryRow(ctx, "SELECT sum(sum) FROM "+c.Table(clickhouse.TableHourly)+" FINAL WHERE variable_id = 'v'").Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 6 {
		t.Errorf("the hourly sums of v add up to %v, want 6 (three points of the second writer's value 2)", sum)
	}
}
