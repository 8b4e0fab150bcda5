package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestShardsPushToTheirOwnPushgatewayGroups: two shards of one deployment
// push side by side (grouping label shard), each naming itself in
// fleetsync_shard_info, instead of the second overwriting the first.
func TestShardsPushToTheirOwnPushgatewayGroups(t *testing.T) {
	addr, _ := startPushgateway(t)

	w := newWorld(t, worldOpts{sync: "shard_count: 2\nshard_index: 0"})
	cfg := w.pushTo(addr)
	w.sync()
	w.cfgPath = filepath.Join(w.dir, "shard-1.yaml")
	if err := os.WriteFile(w.cfgPath, bytes.Replace(cfg, []byte("shard_index: 0"), []byte("shard_index: 1"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	w.sync()
	w.checkOracle()
	_, body := httpGet("http://" + addr + "/metrics")
	for _, series := range []string{
		`fleetsync_shard_info{instance="e2e-test",job="fleetsync",shard="0",shard_count="2",shard_index="0"}`,
		`fleetsync_shard_info{instance="e2e-test",job="fleetsync",shard="1",shard_count="2",shard_index="1"}`,
	} {
		if v, ok := metricValue(body, series); !ok || v != 1 {
			t.Errorf("%s = %v (present %v), want 1; the Pushgateway has:\n%s", series, v, ok, grepLines(body, "fleetsync_shard_info"))
		}
	}
}
