//go:build cluster

package chserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// takenPool is a port pool whose first port is one this test holds, as
// if another process had bound it between the pick and the server's bind.
func takenPool(t *testing.T) (*portPool, int) {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	hold(t, port)
	p := newPortPool(portsLow, ephemeralLow())
	p.next = []int{port}
	return p, port
}

// checkRetried fails the test unless the pool gave out the held port and
// no server of c runs on it.
func checkRetried(t *testing.T, c *Cluster, pool *portPool, held int) {
	t.Helper()
	if len(pool.next) != 0 {
		t.Fatalf("the held port %d was never given to a server", held)
	}
	for s, shard := range c.Nodes {
		for r, n := range shard {
			if n.tcpPort == held {
				t.Fatalf("shard %d replica %d runs on the held port %d", s+1, r+1, held)
			}
		}
	}
}

func TestClusterReplicatesWithinAShardAndRunsDDLOnEveryNode(t *testing.T) {
	ctx := context.Background()
	// The first native port is taken before its server binds it: the
	// cluster starts again on fresh ones.
	pool, held := takenPool(t)
	c, err := StartCluster(ctx, ClusterOptions{Server: Options{ports: pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	checkRetried(t, c, pool, held)
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

	// HealDDLWorkers restarts the server whose error log says its DDL
	// worker died (the line is written here as 18.16 writes it), once,
	// and the cluster runs ON CLUSTER statements after it.
	if healed, err := c.HealDDLWorkers(ctx); err != nil || len(healed) != 0 {
		t.Fatalf("healed %v (%v) on a cluster whose DDL workers all run", healed, err)
	}
	sick := c.Nodes[1][0]
	pid := sick.PID()
	f, err := os.OpenFile(filepath.Join(sick.Dir(), "log", "server.err.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(f, "2026.12.07 15:05:34.423445 [ 3 ] {} <Error> %s: Code: 999, e.displayText() = Coordination::Exception: Node exists\n", ddlWorkerDied); err != nil {
		t.Fatal(err)
	}
	f.Close()
	healed, err := c.HealDDLWorkers(ctx)
	if err != nil || len(healed) != 1 || healed[0] != sick.Addr() || sick.PID() == 0 || sick.PID() == pid {
		t.Fatalf("healed %v (%v), pid %d then %d; want %s restarted", healed, err, pid, sick.PID(), sick.Addr())
	}
	if healed, err := c.HealDDLWorkers(ctx); err != nil || len(healed) != 0 {
		t.Fatalf("healed %v (%v) again for the same death", healed, err)
	}
	if err := conn(c.Nodes[0][0].Addr()).Exec(ctx, "CREATE TABLE IF NOT EXISTS t.y ON CLUSTER fleet (k String) ENGINE = Memory"); err != nil {
		t.Fatalf("an ON CLUSTER statement after the restart: %v", err)
	}
}

// TestClusterWithPerShardReplicaNamesGrowsByAShard builds a cluster whose
// replica macros repeat in every shard (r1, r2), grows it by a shard while
// it runs, and checks that every server then lists the new shard and that
// a replica name made of both macros is unique across the cluster.
func TestClusterWithPerShardReplicaNamesGrowsByAShard(t *testing.T) {
	ctx := context.Background()
	pool := newPortPool(portsLow, ephemeralLow())
	c, err := StartCluster(ctx, ClusterOptions{Shards: 1, Replicas: 2, PerShardReplicaNames: true, Server: Options{ports: pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	// The new shard's first native port is taken before its server binds
	// it: the shard starts again on fresh ones.
	held, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	hold(t, held)
	pool.next = []int{held}
	if err := c.AddShard(ctx); err != nil {
		t.Fatal(err)
	}
	checkRetried(t, c, pool, held)
	if len(c.Nodes) != 2 || len(c.Nodes[1]) != 2 {
		t.Fatalf("after AddShard the cluster has %d shards, want 2 of 2 replicas", len(c.Nodes))
	}
	for s, shard := range c.Nodes {
		for r, n := range shard {
			conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{n.Addr()}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var shards uint64
			var replica string
			if err := conn.QueryRow(ctx, "SELECT uniqExact(shard_num) FROM system.clusters WHERE cluster = 'fleet'").Scan(&shards); err != nil || shards != 2 {
				t.Errorf("shard %d replica %d lists %d shards (%v), want 2", s, r, shards, err)
			}
			if err := conn.QueryRow(ctx, "SELECT substitution FROM system.macros WHERE macro = 'replica'").Scan(&replica); err != nil || replica != fmt.Sprintf("r%d", r+1) {
				t.Errorf("shard %d replica %d has replica macro %q (%v), want r%d", s, r, replica, err, r+1)
			}
		}
	}
	// Both macros in the replica name: 18.16 expands them, and the names
	// differ between shards although the replica macros do not.
	first, err := clickhouse.Open(&clickhouse.Options{Addr: []string{c.Nodes[0][0].Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS g ON CLUSTER fleet",
		"CREATE TABLE IF NOT EXISTS g.w ON CLUSTER fleet (k String) ENGINE = ReplicatedMergeTree('/clickhouse/tables/all/g/w', '{shard}-{replica}') ORDER BY k",
	} {
		if err := first.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var names []string
	rows, err := first.Query(ctx, "SELECT name FROM system.zookeeper WHERE path = '/clickhouse/tables/all/g/w/replicas' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	if fmt.Sprint(names) != "[01-r1 01-r2 02-r1 02-r2]" {
		t.Errorf("replicas of a table kept whole on every node: %v, want [01-r1 01-r2 02-r1 02-r2]", names)
	}
}
