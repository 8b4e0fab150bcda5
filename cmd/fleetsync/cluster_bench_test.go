//go:build cluster

package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	cl := chtest.Cluster(b)
	opts := fleetsim.Options{Seed: 21, Devices: 32, Variables: 4, Points: 2000, Span: 20 * 24 * time.Hour,
		Faults: fleetsim.Faults{Latency: 100 * time.Millisecond}, Tokens: []string{shardToken(0), shardToken(1), shardToken(2), shardToken(3)}}
	sim, err := fleetsim.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	srv := httptest.NewServer(sim)
	defer srv.Close()
	dir := b.TempDir()
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("token-%d", i)), []byte(shardToken(i)), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		var base time.Duration
		for _, shards := range []int{1, 2, 4} {
			db := chtest.ClusterDatabase(b, cl)
			cfgDir := filepath.Join(dir, fmt.Sprintf("%s-%d", db, shards))
			if err := os.MkdirAll(cfgDir, 0o755); err != nil {
				b.Fatal(err)
			}
			for i := range 4 {
				_ = os.Symlink(filepath.Join(dir, fmt.Sprintf("token-%d", i)), filepath.Join(cfgDir, fmt.Sprintf("token-%d", i)))
			}
			// The schema first, so every count pays the same for its cycle.
			migrateCfg := shardConfig(b, cfgDir, srv.URL, cl, db, 0, shards, benchShardSync)
			var sink strings.Builder
			if code := run(context.Background(), []string{"migrate", "--config", migrateCfg}, &sink, &sink, nil); code != 0 {
				b.Fatalf("migrate: %s", sink.String())
			}
			cfgs := make([]string, shards)
			for i := range shards {
				cfgs[i] = shardConfig(b, cfgDir, srv.URL, cl, db, i, shards, benchShardSync)
			}
			sim.ResetCounters()
			t0 := time.Now()
			var wg sync.WaitGroup
			codes := make([]int, shards)
			logs := make([]strings.Builder, shards)
			for i, cfg := range cfgs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var out strings.Builder
					codes[i] = run(context.Background(), []string{"sync", "--config", cfg}, &out, &logs[i], nil)
				}()
			}
			wg.Wait()
			wall := time.Since(t0)
			for i, c := range codes {
				if c != 0 {
					b.Fatalf("%d shards: shard %d exited %d:\n%s", shards, i, c, lastLines(logs[i].String(), 10))
				}
			}
			requests := 0
			for k, c := range sim.Counters() {
				if strings.Contains(k, "/api/") {
					requests += c
				}
			}
			if shards == 1 {
				base = wall
			}
			b.ReportMetric(wall.Seconds(), fmt.Sprintf("s/%d-shards", shards))
			b.Logf("%d shard(s): wall %s, %d API requests, speed-up %.2fx", shards, wall.Round(10*time.Millisecond), requests, base.Seconds()/wall.Seconds())
		}
	}
}
