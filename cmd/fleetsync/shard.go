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

// sharded reports whether this instance is one of several splitting the
// variables.
func sharded(c config.SyncConfig) bool { return c.ShardCount > 1 }

// shardLogger names the shard on every line a sharded instance logs, so
// the lines of parallel shards can be told apart once collected.
func shardLogger(log *zap.Logger, c config.SyncConfig) *zap.Logger {
	if !sharded(c) {
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

// refreshesMetadata reports whether this instance writes the shared
// metadata tables (devices, variables, groups, organizations) and the event
// logs. Shard 0 alone does: every shard walks the metadata anyway to find
// its variables, but writing it from every shard would multiply those
// writes and the event-log requests by the shard count, all against the
// one rate limit of a shared token, and the event logs have one mark per
// event, not per variable, so shards would only redo each other's work.
// The other shards' data never depends on these tables.
func refreshesMetadata(c config.SyncConfig) bool { return c.ShardIndex == 0 }

// shardOf is the index of the shard, of count, that syncs the variable.
func shardOf(variableID string, count int) int {
	for i := 1; i < count; i++ {
		if pipeline.InShard(variableID, i, count) {
			return i
		}
	}
	return 0
}

// shardSummary is the status line of each shard: its variables, how many
// have a mark, how many lag. status reads every shard's marks (they share
// sync_state), so any shard's configuration shows them all.
func shardSummary(w io.Writer, lags []pipeline.VariableLag, count int, threshold time.Duration) {
	type tally struct{ vars, marked, lagging int }
	per := make([]tally, count)
	for _, l := range lags {
		t := &per[shardOf(l.Variable.ID, count)]
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
