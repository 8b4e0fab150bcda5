//go:build cluster

package main

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

// Issue 25: a cluster as operators run it. These tests start a cluster of
// their own (the shared one must keep its shape for the other tests).

// TestClusterReplicaNamesUniqueOnlyPerShardTwoShardsMigrateTogetherAndStayExact
// is issue 25's done-when 1: on a 2x2 cluster whose replica macros are r1
// and r2 in each shard (ClickHouse's own rule), two sync shards started
// together migrate the database at once, run in parallel and leave
// datapoints exact under FINAL, twice; the analyst tables are exact.
// Before schema version 5 migrate failed here with ClickHouse's "Replica
// .../devices/replicas/r2 already exists".
func TestClusterReplicaNamesUniqueOnlyPerShardTwoShardsMigrateTogetherAndStayExact(t *testing.T) {
	cl := chtest.StartCluster(t, chserver.ClusterOptions{PerShardReplicaNames: true})
	cw := newClusterWorld(t, worldOpts{cluster: cl})
	cfg0, cfg1 := cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, "")
	cw.mustSync(cfg0, cfg1)
	cw.settle()
	cw.checkOracle()
	cw.addNewPoints(1000, true, "second")
	cw.mustSync(cfg0, cfg1)
	cw.settle()
	cw.checkOracle()
	cw.checkAnalystTables()
	byShard := cw.variablesByShard()
	if len(byShard[0]) == 0 || len(byShard[1]) == 0 {
		t.Errorf("variables per shard %d and %d, want both shards used", len(byShard[0]), len(byShard[1]))
	}
}

// TestClusterGrowsFromTwoToThreeShardsAndStaysExact is issue 25's
// done-when 2: a 2-shard cluster synced for several cycles grows by a
// ClickHouse shard by the procedure of docs/operations.md (stop the syncs,
// append the shard to remote_servers on every server, fleetsync migrate,
// resume); more cycles then re-read every variable's lookback, and new
// variables appear. datapoints FINAL, the analyst tables and fleetsync
// verify are exact, every variable's rows are on one shard, the new
// variables reach the new shard, and the README's queries answer as on one
// server synced from the same fleet.
func TestClusterGrowsFromTwoToThreeShardsAndStaysExact(t *testing.T) {
	started := time.Now().Add(-time.Second).Truncate(time.Second)
	cl := chtest.StartCluster(t, chserver.ClusterOptions{})
	cw := newClusterWorld(t, worldOpts{cluster: cl})
	cfg0, cfg1 := cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, "")
	for i := range 3 {
		cw.addNewPoints(1000, true, fmt.Sprintf("before %d", i))
		cw.mustSync(cfg0, cfg1)
	}
	cw.settle()
	cw.checkOracle()
	before := cw.variablesByShard()

	// The procedure: the syncs are stopped (none runs here), the shard is
	// appended to remote_servers on every server, then migrate.
	if err := cl.AddShard(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A cycle that runs before migrate (the operator forgot to stop the
	// syncs) creates the tables on the new servers (every Distributed
	// INSERT reaches every shard), says to run migrate and keeps placing
	// every variable on the first two shards.
	cw.addNewPoints(1000, true, "between")
	res := cw.mustSync(cfg0, cfg1)
	if !strings.Contains(res[0].stderr, "until `fleetsync migrate` runs") {
		t.Errorf("a cycle on the grown cluster before migrate did not say to run it; its log ends:\n%s", lastLines(res[0].stderr, 5))
	}
	cw.settle()
	cw.checkOracle()
	if between := cw.variablesByShard(); len(between[2]) != 0 {
		t.Errorf("before migrate the new shard got %d variables, want none", len(between[2]))
	}
	if code, out, errs := cw.cli(context.Background(), "migrate", "--config", cfg0); code != 0 {
		t.Fatalf("migrate after adding a shard exited %d: %s %s", code, out, lastLines(errs, 5))
	}
	d, err := cw.sim.AddDevice("after-growth", 12)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range d.Variables {
		pts := []fleetsim.SimPoint{{TimestampMs: time.Now().Add(-2*time.Hour).UnixMilli() + int64(i), Value: float64(i), Context: map[string]any{}}}
		if err := cw.sim.AddPoints(v.ID, pts); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		cw.addNewPoints(1000, true, fmt.Sprintf("after %d", i))
		cw.mustSync(cfg0, cfg1)
	}
	cw.settle()
	prev := cw.checkMarksCovered(map[string]int64{})
	cw.checkOracle()
	cw.checkAnalystTables()

	after := cw.variablesByShard()
	for s := range before {
		for id := range before[s] {
			if !after[s][id] {
				t.Errorf("variable %s had its rows on shard %d before the growth and not after", id, s+1)
			}
		}
	}
	onNew := 0
	for _, v := range d.Variables {
		if after[2][v.ID] {
			onNew++
		}
	}
	if onNew == 0 || len(after[2]) != onNew {
		t.Errorf("the new shard holds %d variables, %d of them new; want some new variables and only new ones there", len(after[2]), onNew)
	}
	t.Logf("variables per shard: %d, %d, %d (%d of the %d new ones on the new shard)", len(after[0]), len(after[1]), len(after[2]), onNew, len(d.Variables))

	// verify over everything the source holds.
	code, out, errs := cw.cli(context.Background(), "verify", "--config", cfg0, "--from", "2000-01-01T00:00:00Z", "--to", fmt.Sprint(time.Now().UnixMilli()))
	if code != 0 || !strings.Contains(out, " 0 mismatch") {
		t.Errorf("verify after the growth exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}

	// The README's queries, against one server synced from the same fleet.
	one := cw.oneServerSync(chtest.Shared(t))
	cw.mustSync(one.cfg, cfg0, cfg1)
	cw.settle()
	cw.checkMarksCovered(prev)
	cw.checkOracle()
	cw.checkReadmeQueries(one, started, time.Now())
}

// TestClusterServerReplacedByTheDocumentedProcedureCatchesUpAndStaysExact
// replaces a server of a synced cluster as docs/operations.md (Replacing a
// server) says: a new, empty server with the same {shard} and a new
// {replica} takes the old one's place in remote_servers, then fleetsync
// migrate. The new server's replicas fetch what their siblings hold, no
// variable moves, and the next cycles are exact.
func TestClusterServerReplacedByTheDocumentedProcedureCatchesUpAndStaysExact(t *testing.T) {
	ctx := context.Background()
	cl := chtest.StartCluster(t, chserver.ClusterOptions{PerShardReplicaNames: true})
	cw := newClusterWorld(t, worldOpts{cluster: cl})
	cfg0, cfg1 := cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, "")
	cw.addNewPoints(1000, true, "before")
	cw.mustSync(cfg0, cfg1)
	cw.settle()
	before := cw.variablesByShard()

	oldName := cl.ReplicaName(1, 0)
	if err := cl.ReplaceServer(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	// The configurations list the servers: the new one instead.
	cfg0, cfg1 = cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, "")
	if code, out, errs := cw.cli(ctx, "migrate", "--config", cfg0); code != 0 {
		t.Fatalf("migrate after replacing a server exited %d: %s %s", code, out, lastLines(errs, 5))
	}
	cw.addNewPoints(1000, true, "after")
	cw.mustSync(cfg0, cfg1)
	cw.settle() // the new replica holds its sibling's datapoints rows
	cw.checkOracle()
	cw.checkAnalystTables()
	if after := cw.variablesByShard(); !reflect.DeepEqual(after, before) {
		t.Errorf("variables per shard changed with the replacement: %d/%d before, %d/%d after", len(before[0]), len(before[1]), len(after[0]), len(after[1]))
	}
	// The tables kept whole on every server reach the new one too.
	fresh, sibling := openConn(t, cl.Nodes[1][0]), openConn(t, cl.Nodes[1][1])
	for _, table := range []string{"devices", "variables", "sync_state", "variable_shards", "shard_layout"} {
		q := "SELECT count() FROM `" + cw.db + "`." + table
		deadline := time.Now().Add(time.Minute)
		for {
			var got, want uint64
			errG := fresh.QueryRow(ctx, q).Scan(&got)
			errW := sibling.QueryRow(ctx, q).Scan(&want)
			if errG == nil && errW == nil && got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the new server holds %d rows (%v), its sibling %d (%v)", table, got, errG, want, errW)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// ZooKeeper keeps the old replica until it is removed by hand (the
	// procedure's last step); the new one is there under its own name.
	names := chtest.Strings(t, cw.conn, "SELECT name FROM system.zookeeper WHERE path = '/clickhouse/tables/all/"+cw.db+"/devices/replicas' ORDER BY name")
	if want := "02-" + cl.ReplicaName(1, 0); !slices.Contains(names, want) || !slices.Contains(names, "02-"+oldName) {
		t.Errorf("replicas of devices in ZooKeeper: %v, want the new %s beside the old 02-%s", names, want, oldName)
	}
}
