package clickhouse

import (
	"strings"
	"testing"
)

func TestReplicatedEngineKeepsTheEngineArgumentsAndClauses(t *testing.T) {
	tests := []struct{ engine, want string }{
		{"ReplacingMergeTree(version) PARTITION BY toYYYYMM(ts) ORDER BY (variable_id, ts_ms)",
			"ReplicatedReplacingMergeTree('/ch/{shard}/db/datapoints_local', '{replica}', version) PARTITION BY toYYYYMM(ts) ORDER BY (variable_id, ts_ms)"},
		{"ReplacingMergeTree ORDER BY version",
			"ReplicatedReplacingMergeTree('/ch/{shard}/db/datapoints_local', '{replica}') ORDER BY version"},
		{"ReplacingMergeTree() ORDER BY id",
			"ReplicatedReplacingMergeTree('/ch/{shard}/db/datapoints_local', '{replica}') ORDER BY id"},
		{"AggregatingMergeTree ORDER BY (variable_id, hour)",
			"ReplicatedAggregatingMergeTree('/ch/{shard}/db/datapoints_local', '{replica}') ORDER BY (variable_id, hour)"},
	}
	for _, tt := range tests {
		got, err := replicatedEngine(tt.engine, "/ch/{shard}/", "db", "datapoints_local", shardReplica)
		if err != nil || got != tt.want {
			t.Errorf("replicatedEngine(%q)\n got: %q (%v)\nwant: %q", tt.engine, got, err, tt.want)
		}
	}
	if _, err := replicatedEngine("Log", "/ch/{shard}", "db", "x", shardReplica); err == nil || !strings.Contains(err.Error(), "no replicated form") {
		t.Errorf("a Log table: error %v, want one saying it has no replicated form", err)
	}
}

func TestPlacementShardsTheDataTablesByVariableAndKeepsTheRestWhole(t *testing.T) {
	for _, td := range schema {
		// The analyst tables live beside the points they aggregate.
		want := td.name == TableDatapoints || td.name == TableLatest || td.name == TableHourly
		if got := sharded(td); got != want {
			t.Errorf("%s: sharded = %v, want %v", td.name, got, want)
		}
		if _, err := replicatedEngine(td.engine, DefaultZookeeperPath, "db", td.name+localSuffix, shardReplica); err != nil {
			t.Errorf("%s: %v", td.name, err)
		}
		if sharded(td) {
			if key, err := shardingKey(td); err != nil || key != "shard_key" {
				t.Errorf("%s: sharding key %q (%v), want shard_key", td.name, key, err)
			}
		}
	}
	// A table added later (the analyst tables) inherits by its sort key.
	hourly := tableDef{name: "datapoints_hourly", engine: "ReplacingMergeTree(version) ORDER BY (variable_id, hour)"}
	if key, err := shardingKey(hourly); !sharded(hourly) || err != nil || key != "shard_key" {
		t.Errorf("a table sorted by (variable_id, hour): sharded %v by %q (%v), want sharded by shard_key", sharded(hourly), key, err)
	}
}
