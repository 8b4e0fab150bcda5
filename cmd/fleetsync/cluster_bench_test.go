//go:build cluster

package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

// benchShardSync is what the scaling benchmark syncs with: one variable per
// raw-series request and a small limit, so the cycle is many requests, each
// waiting out the source's latency, as over a WAN.
const benchShardSync = "rows_per_request: 500\nvariables_per_request: 1\nmax_in_flight: 2"

// BenchmarkClusterShardScaling (issue 13, done-when 7) syncs one fleet from
// a fleetsim with 100 ms of latency per request into the local cluster with
// 1, 2 and 4 shards started at once, each shard with its own token, each
// count into a fresh database, and reports each count's wall time (the
// first cycle, start of the first shard to end of the last) and speed-up
// over one shard. Run it with
//
//	go test -tags cluster -run '^$' -bench BenchmarkClusterShardScaling -benchtime 1x ./cmd/fleetsync
func BenchmarkClusterShardScaling(b *testing.B) {
	w := newClusterWorld(b, worldOpts{sim: fleetsim.Options{Seed: 21, Devices: 32, Variables: 4, Points: 2000, Span: 20 * 24 * time.Hour,
		Faults: fleetsim.Faults{Latency: 100 * time.Millisecond}}})
	for range b.N {
		var base time.Duration
		for _, shards := range []int{1, 2, 4} {
			w.db = chtest.ClusterDatabase(b, w.cl)
			// The schema first, so every count pays the same for its cycle.
			if code, _, errs := w.cli(context.Background(), "migrate", "--config", w.shardConfig(0, shards, benchShardSync)); code != 0 {
				b.Fatalf("migrate: %s", errs)
			}
			cfgs := make([]string, shards)
			for i := range shards {
				cfgs[i] = w.shardConfig(i, shards, benchShardSync)
			}
			w.sim.ResetCounters()
			t0 := time.Now()
			res := w.syncShards(nil, cfgs...)
			wall := time.Since(t0)
			for i, r := range res {
				if r.code != 0 {
					b.Fatalf("%d shards: shard %d exited %d:\n%s", shards, i, r.code, lastLines(r.stderr, 10))
				}
			}
			if shards == 1 {
				base = wall
			}
			b.ReportMetric(wall.Seconds(), fmt.Sprintf("s/%d-shards", shards))
			b.Logf("%d shard(s): wall %s, %d API requests, speed-up %.2fx", shards, wall.Round(10*time.Millisecond), w.allRequests(), base.Seconds()/wall.Seconds())
		}
	}
}
