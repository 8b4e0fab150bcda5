//go:build cluster

package clickhouse

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// BenchmarkClusterReplicaBarrier measures what readReplicated adds to a
// commit's recompute on the local cluster (2 shards x 2 replicas): the
// barrier alone (a read that does nothing), and the recompute of an
// incremental cycle's 100 variables with and without it, on a quiet
// cluster and while another client loads nonstop (a batch of 20
// variables x 1,000 points after another, as a backfill does), so that
// every look finds fetches under way. Run it with
//
//	go test -tags cluster -run '^$' -bench BenchmarkClusterReplicaBarrier -benchtime 20x ./load/clickhouse
func BenchmarkClusterReplicaBarrier(b *testing.B) {
	cl := chtest.Cluster(b)
	ctx := context.Background()
	db := chtest.ClusterDatabase(b, cl)
	open := func() *Client {
		c, err := Open(ctx, Config{Addr: cl.Addrs(), Database: db, Cluster: cl.Name()}, nil, prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	c := open()
	if err := c.Schema().Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	const vars, perVar = 100, 2000
	base := int64(1_700_000_000_000)
	var seed pipeline.Batch
	touched := make([]analyst.Range, vars)
	for v := range vars {
		id := fmt.Sprintf("variable-%03d", v)
		for i := range perVar {
			seed.Append(pipeline.Row{VariableID: id, DeviceID: "dev", TsMs: base + int64(i)*30_000, Value: float64(i), Context: "{}"})
		}
		// An incremental cycle's range: the last hour (the lookback).
		touched[v] = analyst.Range{VariableID: id, FromMs: base + int64(perVar)*30_000 - 3_600_000, ToMs: base + int64(perVar-1)*30_000, Loaded: true}
	}
	if err := c.Write(ctx, []*pipeline.Batch{&seed}); err != nil {
		b.Fatal(err)
	}
	// Every replica holds the seed before the clock starts.
	if err := c.cluster().readReplicated(ctx, func(context.Context) error { return nil }, TableDatapoints); err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"barrier-only", func(ctx context.Context) error {
			return c.cluster().readReplicated(ctx, func(context.Context) error { return nil }, TableDatapoints)
		}},
		{"recompute-without-barrier", func(ctx context.Context) error { return c.AnalystTables().recompute(ctx, touched) }},
		{"recompute", func(ctx context.Context) error { return c.AnalystTables().Recompute(ctx, touched) }},
	}
	for _, load := range []bool{false, true} {
		for _, tc := range cases {
			name := "quiet/" + tc.name
			if load {
				name = "loading/" + tc.name
			}
			b.Run(name, func(b *testing.B) {
				stop := make(chan struct{})
				var wg sync.WaitGroup
				loads := 0
				if load {
					loader := open()
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := 0; ; n++ {
							select {
							case <-stop:
								return
							default:
							}
							var batch pipeline.Batch
							for v := range 20 {
								for i := range 1000 {
									batch.Append(pipeline.Row{VariableID: fmt.Sprintf("load-%d-%02d", n, v), DeviceID: "dev", TsMs: base + int64(i)*1000, Value: float64(i), Context: "{}"})
								}
							}
							if err := loader.Write(ctx, []*pipeline.Batch{&batch}); err != nil {
								b.Error(err)
								return
							}
							loads++
						}
					}()
					time.Sleep(time.Second)
				}
				b.ResetTimer()
				for range b.N {
					if err := tc.run(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				close(stop)
				wg.Wait()
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
				if load {
					b.ReportMetric(float64(loads), "loads")
				}
			})
		}
	}
}
