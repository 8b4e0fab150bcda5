package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/config"
	"github.com/fleetsync/fleetsync/pipeline"
)

// shardOfConfig is the shard sync.shard_index and sync.shard_count name;
// what a shard reads, locks and writes is pipeline.Shard's.
func shardOfConfig(c config.SyncConfig) pipeline.Shard {
	return pipeline.Shard{Index: c.ShardIndex, Count: c.ShardCount}
}

// shardLogger names the shard on every line a sharded instance logs, so
// the lines of parallel shards can be told apart once collected.
func shardLogger(log *zap.Logger, c config.SyncConfig) *zap.Logger {
	if !shardOfConfig(c).Sharded() {
		return log
	}
	return log.With(zap.Int("shard_index", c.ShardIndex), zap.Int("shard_count", c.ShardCount))
}

// registerShardInfo exports which shard this instance is, so that every
// series of a scrape or a push can be joined to its shard.
func registerShardInfo(reg prometheus.Registerer, c config.SyncConfig) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleetsync_shard_info",
		Help: "The shard this instance syncs (sync.shard_index of sync.shard_count); always 1.",
	}, []string{"shard_index", "shard_count"})
	g.WithLabelValues(strconv.Itoa(c.ShardIndex), strconv.Itoa(c.ShardCount)).Set(1)
	return reg.Register(g)
}

// shardSummary is the status line of each shard: its variables, how many
// have a mark, how many lag. status reads every shard's marks (they share
// sync_state), so any shard's configuration shows them all.
func shardSummary(w io.Writer, lags []pipeline.VariableLag, count int, threshold time.Duration) {
	type tally struct{ vars, marked, lagging int }
	per := make([]tally, count)
	for _, l := range lags {
		t := &per[pipeline.ShardOf(l.Variable.ID, count)]
		t.vars++
		if l.HasMark {
			t.marked++
		}
		if l.Lag > threshold {
			t.lagging++
		}
	}
	for i, t := range per {
		fmt.Fprintf(w, "shard %d of %d: %d variables, %d with a mark, %d lagging\n", i, count, t.vars, t.marked, t.lagging)
	}
}
