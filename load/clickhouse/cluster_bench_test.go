//go:build cluster

package clickhouse

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// BenchmarkClusterInsertPath compares the two ways to load a batch into the
// local cluster: through the Distributed datapoints with
// insert_distributed_sync=1 (what fleetsync does), and straight into the
// datapoints_local of the replica of the shard that owns each row (the
// client splitting the batch by the same sipHash64(variable_id) the
// Distributed table uses, one INSERT per shard at once). Run it with
//
//	go test -tags cluster -run '^$' -bench BenchmarkClusterInsertPath -benchtime 5x ./load/clickhouse
func BenchmarkClusterInsertPath(b *testing.B) {
	cl := chtest.Cluster(b)
	ctx := context.Background()
	const vars, perVar = 500, 400 // 200k rows per INSERT
	batch := func() *pipeline.Batch {
		var p pipeline.Batch
		for v := range vars {
			for i := range perVar {
				p.Append(pipeline.Row{VariableID: fmt.Sprintf("variable-%04d", v), DeviceID: "dev", DeviceLabel: "d", VariableLabel: "v",
					TsMs: int64(1_700_000_000_000 + i*1000), Value: float64(i), Context: "{}"})
			}
		}
		return &p
	}()
	open := func(addrs []string, db, cluster string) *Client {
		c, err := Open(ctx, Config{Addr: addrs, Database: db, Cluster: cluster}, nil, prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	db := chtest.ClusterDatabase(b, cl)
	c := open(cl.Addrs(), db, cl.Name())
	if err := c.Schema().Migrate(ctx); err != nil {
		b.Fatal(err)
	}

	b.Run("distributed", func(b *testing.B) {
		for range b.N {
			if err := c.Write(ctx, []*pipeline.Batch{batch}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(vars*perVar*b.N)/b.Elapsed().Seconds(), "rows/s")
	})

	b.Run("direct-to-shard", func(b *testing.B) {
		// Which shard owns each variable, as the Distributed table decides.
		owner := map[string]int{}
		rows, err := c.Conn().Query(ctx, fmt.Sprintf("SELECT DISTINCT variable_id, toUInt8(sipHash64(variable_id) %% %d) FROM %s", len(cl.Nodes), c.Table(TableDatapoints)))
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var id string
			var s uint8
			if err := rows.Scan(&id, &s); err != nil {
				b.Fatal(err)
			}
			owner[id] = int(s)
		}
		rows.Close()
		parts := make([]*pipeline.Batch, len(cl.Nodes))
		for i := range parts {
			parts[i] = new(pipeline.Batch)
		}
		for i, id := range batch.VariableID {
			parts[owner[id]].Append(pipeline.Row{VariableID: id, DeviceID: batch.DeviceID[i], DeviceLabel: batch.DeviceLabel[i],
				VariableLabel: batch.VariableLabel[i], TsMs: batch.TsMs[i], Value: batch.Value[i], Context: batch.Context[i]})
		}
		locals := make([]*Client, len(cl.Nodes))
		for s, shard := range cl.Nodes {
			locals[s] = open([]string{shard[0].Addr()}, db, "")
			locals[s].insertPointsSQL = "INSERT INTO " + locals[s].cluster().localTable(TableDatapoints) + " (" + pointColumnList + ")"
		}
		b.ResetTimer()
		for range b.N {
			var wg sync.WaitGroup
			errs := make([]error, len(locals))
			for s, lc := range locals {
				wg.Add(1)
				go func() { defer wg.Done(); errs[s] = lc.Write(ctx, []*pipeline.Batch{parts[s]}) }()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(vars*perVar*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}
