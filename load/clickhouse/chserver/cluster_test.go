//go:build cluster

package chserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestClusterReplicatesWithinAShardAndRunsDDLOnEveryNode(t *testing.T) {
	ctx := context.Background()
	c, err := StartCluster(ctx, ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	conn := func(addr string) clickhouse.Conn {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Settings: clickhouse.Settings{"insert_distributed_sync": 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	first := conn(c.Nodes[0][0].Addr())
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS t ON CLUSTER fleet",
		"CREATE TABLE IF NOT EXISTS t.x_local ON CLUSTER fleet (k String, v UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/t/x', '{replica}') ORDER BY k",
		"CREATE TABLE IF NOT EXISTS t.x ON CLUSTER fleet AS t.x_local ENGINE = Distributed(fleet, t, x_local, sipHash64(k))",
	} {
		if err := first.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	b, err := first.PrepareBatch(ctx, "INSERT INTO t.x (k, v)")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := b.Append(fmt.Sprint("key-", i), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	// Each shard got some rows; both replicas of a shard hold the same.
	total := uint64(0)
	for s, shard := range c.Nodes {
		var counts [2]uint64
		deadline := time.Now().Add(60 * time.Second)
		for {
			for r, n := range shard {
				if err := conn(n.Addr()).QueryRow(ctx, "SELECT count() FROM t.x_local").Scan(&counts[r]); err != nil {
					t.Fatalf("shard %d replica %d: %v", s, r, err)
				}
			}
			if counts[0] == counts[1] || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if counts[0] == 0 || counts[0] != counts[1] {
			t.Errorf("shard %d: replicas hold %v rows, want the same non-zero count", s, counts)
		}
		total += counts[0]
	}
	if total != 100 {
		t.Errorf("shards hold %d rows in all, want 100", total)
	}
	var viaDist uint64
	if err := conn(c.Nodes[1][1].Addr()).QueryRow(ctx, "SELECT count() FROM t.x").Scan(&viaDist); err != nil || viaDist != 100 {
		t.Errorf("through the Distributed table on another node: %d rows (%v), want 100", viaDist, err)
	}
}
