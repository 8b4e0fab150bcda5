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
		got, err := replicatedEngine(tt.engine, "/ch/{shard}/", "db", "datapoints_local")
		if err != nil || got != tt.want {
			t.Errorf("replicatedEngine(%q)\n got: %q (%v)\nwant: %q", tt.engine, got, err, tt.want)
		}
	}
	if _, err := replicatedEngine("Log", "/ch/{shard}", "db", "x"); err == nil || !strings.Contains(err.Error(), "no replicated form") {
		t.Errorf("a Log table: error %v, want one saying it has no replicated form", err)
	}
}

func TestShardingKeyHashesTheFirstSortingColumnOfEveryTable(t *testing.T) {
	want := map[string]string{
		TableDatapoints:         "sipHash64(variable_id)",
		TableSyncState:          "sipHash64(variable_id)",
		TableDevices:            "sipHash64(id)",
		TableSyncLease:          "sipHash64(name)",
		TableDeviceGroupMembers: "sipHash64(group_id)",
		TableSchemaMigrations:   "sipHash64(version)",
	}
	for _, td := range schema {
		got, err := shardingKey(td)
		if err != nil {
			t.Errorf("%s: %v", td.name, err)
			continue
		}
		if w, ok := want[td.name]; ok && got != w {
			t.Errorf("%s: sharding key %q, want %q", td.name, got, w)
		}
		if _, err := replicatedEngine(td.engine, DefaultZookeeperPath, "db", td.name+localSuffix); err != nil {
			t.Errorf("%s: %v", td.name, err)
		}
	}
}
