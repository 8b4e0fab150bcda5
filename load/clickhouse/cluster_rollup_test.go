//go:build cluster

package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// TestClusterRecomputeAfterTheWritingReplicaDiedCountsEveryAcknowledgedPoint
// is issue 24's case 5, once for a variable of each shard: the first shard
// has the node the client is connected to, which the kill takes away from
// the client too (the case), the second is reached through it.
//
// A variable's points are loaded and rolled up, then more points of the
// same hour are loaded while neither replica of its shard may fetch parts
// (SYSTEM STOP FETCHES), so the replica that takes the INSERT is the only
// one holding it; that replica is killed, fetches are allowed again, and
// the rollups are recomputed through the client, as a cycle does once its
// INSERT is acknowledged. The stopped fetches make the replica's death land
// before its sibling could copy the part, every run, instead of in a
// window of milliseconds.
//
// Read from the sibling, the only replica left, the recompute writes
// hourly and latest rows without the new points, whose newer version wins
// once the killed replica is back, and the cycle, done, never recomputes
// them again. It must instead fail, retryably and naming the replica that
// holds the missing part, so that the cycle fails and the next one, once
// the replica is back, recomputes the rows: the analyst tables must end
// equal to datapoints FINAL.
func TestClusterRecomputeAfterTheWritingReplicaDiedCountsEveryAcknowledgedPoint(t *testing.T) {
	cl := chtest.Cluster(t)
	for shard := range cl.Nodes {
		t.Run(fmt.Sprintf("shard%d", shard+1), func(t *testing.T) {
			f := newRollupFixture(t, cl, shard)
			second, secondRange := f.points(40, 40)
			writer := f.writeToOneReplica(second)
			f.kill(writer)
			f.fetches(1-writer, "START")
			f.recomputeOrFail(f.c, secondRange, writer, func() {
				if err := cl.Resume(context.Background(), f.replicas[writer]); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestClusterRecomputeRightAfterAReplicaReturnedCountsEveryAcknowledgedPoint
// is case 5's other half: the replica that took a load dies, the next load
// goes to its sibling, and the first comes back, but cannot fetch that
// load's part yet (its fetches are stopped once it answers, before it has
// pulled its queue). A recompute through a client connected to it reads
// its local replica (prefer_localhost_replica), which ClickHouse deems
// fresh as soon as it has pulled its queue: it would write rows without
// the third load's points. It must instead fail, naming the replica, until
// that replica has the part.
func TestClusterRecomputeRightAfterAReplicaReturnedCountsEveryAcknowledgedPoint(t *testing.T) {
	cl := chtest.Cluster(t)
	f := newRollupFixture(t, cl, 1)
	ctx := context.Background()
	second, _ := f.points(40, 20)
	writer := f.writeToOneReplica(second)
	f.fetches(1-writer, "START")
	localCounts(t, cl, f.db)
	f.kill(writer)
	third, thirdRange := f.points(60, 20)
	if err := f.c.Write(ctx, []*pipeline.Batch{third}); err != nil {
		t.Fatalf("the third load, with %s down: %v", f.name(writer), err)
	}
	if err := cl.Resume(ctx, f.replicas[writer]); err != nil {
		t.Fatal(err)
	}
	f.fetches(writer, "STOP")
	// Wait until ClickHouse deems the returned replica fresh: up in
	// ZooKeeper, with its queue pulled (18.16 takes some seconds after it
	// answers), so a replication delay below
	// max_replica_delay_for_distributed_queries, though it lacks the part.
	var maxDelay string
	if err := f.nodes[writer].Conn().QueryRow(ctx, "SELECT value FROM system.settings WHERE name = 'max_replica_delay_for_distributed_queries'").Scan(&maxDelay); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(90 * time.Second); ; {
		var fresh uint8
		err := f.nodes[writer].Conn().QueryRow(ctx, "SELECT is_readonly = 0 AND absolute_delay < "+maxDelay+" FROM system.replicas WHERE database = ? AND table = ?",
			f.db, TableDatapoints+localSuffix).Scan(&fresh)
		if err == nil && fresh == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up with its queue pulled 90s after it was started again (%v)", f.name(writer), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if k, err := f.raw(writer); err != nil || k != f.loaded {
		t.Fatalf("%s holds %d rows of %s (%v), want %d: without the third load", f.name(writer), k, f.id, err, f.loaded)
	}
	returned, err := Open(ctx, Config{Addr: []string{f.replicas[writer].Addr()}, Database: f.db, Cluster: cl.Name(), InsertTimeout: 10 * time.Second}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { returned.Close() })
	f.recomputeOrFail(returned, thirdRange, writer, func() { f.fetches(writer, "START") })
}

// rollupFixture is a variable of one shard of the test cluster, loaded
// and rolled up once, with a client on every node and one on each replica
// of its shard.
type rollupFixture struct {
	t        *testing.T
	cl       *chserver.Cluster
	db, id   string
	shard    int
	c        *Client
	replicas []*chserver.Server
	nodes    []*Client
	// local is the shard's local datapoints table.
	local string
	// loaded is the raw row count of the variable on every replica.
	loaded uint64
}

// rollupHour is the hour every point of the fixture lies in.
const rollupHour = int64(1_699_999_200_000) // 2023-11-14 22:00 UTC

// newRollupFixture loads 40 points of a variable of shard (counted from
// 0), rolls them up and waits until both replicas hold them.
func newRollupFixture(t *testing.T, cl *chserver.Cluster, shard int) *rollupFixture {
	ctx := context.Background()
	f := &rollupFixture{t: t, cl: cl, db: chtest.ClusterDatabase(t, cl), shard: shard, replicas: cl.Nodes[shard]}
	// A short InsertTimeout: a rollup read waits half of it for the
	// replicas, and here it only has to give up.
	var err error
	f.c, err = Open(ctx, Config{Addr: cl.Addrs(), Database: f.db, Cluster: cl.Name(), MaxElapsed: 15 * time.Second, InsertTimeout: 10 * time.Second}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.c.Close() })
	if err := f.c.Schema().Migrate(ctx); err != nil {
		t.Fatalf("Migrate on the cluster: %v", err)
	}
	f.id = variableOfShard(t, f.c, len(cl.Nodes), shard)
	f.local = "`" + f.db + "`.`" + TableDatapoints + localSuffix + "`"
	first, firstRange := f.points(0, 40)
	if err := f.c.Write(ctx, []*pipeline.Batch{first}); err != nil {
		t.Fatal(err)
	}
	if err := f.c.AnalystTables().Recompute(ctx, []analyst.Range{firstRange}); err != nil {
		t.Fatal(err)
	}
	if got := localCounts(t, cl, f.db)[shard][f.id]; got != 40 {
		t.Fatalf("shard %d holds %d rows of %s after the first load, want 40", shard, got, f.id)
	}
	f.loaded = 40
	for _, n := range f.replicas {
		f.nodes = append(f.nodes, onNode(t, n, f.db))
	}
	// Whatever a test does, it leaves the shard fetching again.
	t.Cleanup(func() {
		for r, n := range f.replicas {
			if n.PID() != 0 {
				_ = f.nodes[r].Conn().Exec(context.Background(), "SYSTEM START FETCHES "+f.local)
			}
		}
	})
	return f
}

// points are n points of the variable from the first-th on, 30s apart,
// values first², ..., and their range.
func (f *rollupFixture) points(first, n int) (*pipeline.Batch, analyst.Range) {
	var b pipeline.Batch
	for i := first; i < first+n; i++ {
		b.Append(pipeline.Row{VariableID: f.id, DeviceID: "dev", TsMs: rollupHour + int64(i)*30_000, Value: float64(i * i), Context: "{}"})
	}
	return &b, analyst.Range{VariableID: f.id, FromMs: rollupHour + int64(first)*30_000, ToMs: rollupHour + int64(first+n-1)*30_000}
}

// name is the cluster's {replica} macro of replica r of the shard.
func (f *rollupFixture) name(r int) string { return fmt.Sprintf("s%dr%d", f.shard+1, r+1) }

// raw counts the variable's rows on replica r, merged or not.
func (f *rollupFixture) raw(r int) (uint64, error) {
	var k uint64
	err := f.nodes[r].Conn().QueryRow(context.Background(), "SELECT count() FROM "+f.local+" WHERE variable_id = ?", f.id).Scan(&k)
	return k, err
}

// fetches stops or starts (verb) replica r's fetches of other replicas'
// parts.
func (f *rollupFixture) fetches(r int, verb string) {
	f.t.Helper()
	if err := f.nodes[r].Conn().Exec(context.Background(), "SYSTEM "+verb+" FETCHES "+f.local); err != nil {
		f.t.Fatalf("SYSTEM %s FETCHES on %s: %v", verb, f.name(r), err)
	}
}

// writeToOneReplica loads b with the shard's fetches stopped, so that only
// the replica that takes the INSERT holds it, and returns that replica.
// Fetches stay stopped on the other one.
func (f *rollupFixture) writeToOneReplica(b *pipeline.Batch) int {
	f.t.Helper()
	for r := range f.replicas {
		f.fetches(r, "STOP")
	}
	if err := f.c.Write(context.Background(), []*pipeline.Batch{b}); err != nil {
		f.t.Fatalf("load %d points: %v", b.Len(), err)
	}
	writer := -1
	for r := range f.replicas {
		k, err := f.raw(r)
		if err != nil {
			f.t.Fatal(err)
		}
		switch {
		case k == f.loaded+uint64(b.Len()):
			writer = r
		case k != f.loaded:
			f.t.Fatalf("%s holds %d rows of %s, want %d or %d", f.name(r), k, f.id, f.loaded, f.loaded+uint64(b.Len()))
		}
	}
	if writer < 0 {
		f.t.Fatalf("no replica of shard %d holds the load; replication state: %q", f.shard, replicationState(f.t, f.nodes, f.db))
	}
	f.fetches(writer, "START")
	f.loaded += uint64(b.Len())
	return writer
}

// kill kills replica r until the test ends or resumes it.
func (f *rollupFixture) kill(r int) {
	f.t.Helper()
	n := f.replicas[r]
	f.t.Cleanup(func() { _ = f.cl.Resume(context.Background(), n) })
	if err := n.Kill(); err != nil {
		f.t.Fatal(err)
	}
}

// recomputeOrFail recomputes rng through c while a replica that is up
// lacks the last load. That must fail, retryably and naming replica named
// (the one that lacks it or the one that holds it), as the cycle would;
// then heal makes the part reachable, and the next cycle's recompute, once both replicas hold
// it, must make the analyst tables equal to datapoints FINAL. A recompute
// that succeeds instead is a cycle that commits its marks: nothing
// recomputes its hour again, and its rows must be exact as they are.
func (f *rollupFixture) recomputeOrFail(c *Client, rng analyst.Range, named int, heal func()) {
	t := f.t
	t.Helper()
	ctx := context.Background()
	err := c.AnalystTables().Recompute(ctx, []analyst.Range{rng})
	heal()
	if err != nil {
		t.Logf("Recompute: %v", err)
		if !pipeline.IsRetryable(err) || !strings.Contains(err.Error(), f.name(named)) {
			t.Errorf("Recompute: %v; want a retryable error naming %s", err, f.name(named))
		}
		// A fetch that failed meanwhile is retried with a backoff.
		localCounts(t, f.cl, f.db)
		if err := c.AnalystTables().Recompute(ctx, []analyst.Range{rng}); err != nil {
			t.Fatalf("Recompute once both replicas hold every point: %v", err)
		}
	}
	syncReplicas(t, f.cl, f.db, TableDatapoints, TableHourly, TableLatest)
	checkRollupsOf(t, f.c, f.id)
}

// variableOfShard is a variable id that the Distributed tables place on
// shard (counted from 0) of shards of equal weight.
func variableOfShard(t *testing.T, c *Client, shards, shard int) string {
	t.Helper()
	for i := range 100 {
		id := fmt.Sprintf("case5-%d", i)
		var s uint64
		if err := c.Conn().QueryRow(context.Background(), fmt.Sprintf("SELECT toUInt64(sipHash64(?) %% %d)", shards), id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if int(s) == shard {
			return id
		}
	}
	t.Fatalf("no variable id of shard %d among 100", shard)
	return ""
}

// syncReplicas waits until every replica of the local tables of names has
// caught up with the replication log (SYSTEM SYNC REPLICA), so that reads
// through the Distributed tables see the same rows whichever replica they
// reach.
func syncReplicas(t *testing.T, cl *chserver.Cluster, db string, names ...string) {
	t.Helper()
	for s, shard := range cl.Nodes {
		for r, node := range shard {
			n := onNode(t, node, db)
			for _, name := range names {
				if err := n.Conn().Exec(context.Background(), "SYSTEM SYNC REPLICA `"+db+"`.`"+name+localSuffix+"`"); err != nil {
					t.Fatalf("shard %d replica %d: SYNC REPLICA %s: %v", s, r, name, err)
				}
			}
		}
	}
}

// checkRollupsOf compares the hourly and latest rows of variable id under
// FINAL with the same aggregates computed over datapoints FINAL, and prints
// the rows that differ.
func checkRollupsOf(t *testing.T, c *Client, id string) {
	t.Helper()
	lines := func(q string) []string { t.Helper(); return chtest.Strings(t, c.Conn(), q, id) }
	const hourly = "concat(toString(hour), ' count ', toString(count), ' sum ', toString(sum), ' min ', toString(min), ' max ', toString(max), " +
		"' first ', toString(first_value), '@', toString(first_ts_ms), ' last ', toString(last_value), '@', toString(last_ts_ms))"
	for _, q := range []struct{ name, got, want string }{
		{
			TableHourly,
			"SELECT " + hourly + " FROM " + c.Table(TableHourly) + " FINAL WHERE variable_id = ? ORDER BY hour",
			"SELECT " + hourly + " FROM (SELECT toStartOfHour(ts) AS hour, count() AS count, " + hourlySum + " AS sum, min(value) AS min, max(value) AS max, " +
				"argMin(value, ts_ms) AS first_value, min(ts_ms) AS first_ts_ms, argMax(value, ts_ms) AS last_value, max(ts_ms) AS last_ts_ms " +
				"FROM " + c.Table(TableDatapoints) + " FINAL WHERE variable_id = ? GROUP BY hour) ORDER BY hour",
		},
		{
			TableLatest,
			"SELECT concat(toString(ts_ms), ' ', toString(value)) FROM " + c.Table(TableLatest) + " FINAL WHERE variable_id = ?",
			"SELECT concat(toString(newest), ' ', toString(v)) FROM (SELECT max(ts_ms) AS newest, argMax(value, ts_ms) AS v FROM " + c.Table(TableDatapoints) + " FINAL WHERE variable_id = ?)",
		},
	} {
		got, want := lines(q.got), lines(q.want)
		if len(want) == 0 {
			t.Fatalf("datapoints FINAL holds no point of %s", id)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s of %s under FINAL:\n%s\nwant (from datapoints FINAL):\n%s", q.name, id, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestClusterAReadWhoseReplicaDiesMidQueryIsRetried shows what a read
// through a Distributed table gives when the replica serving it dies
// mid-query: code 32 (ATTEMPT_TO_READ_AFTER_EOF, "while receiving packet
// from" the replica), which Retry now retries, and the next attempt reads
// the replica that is up. The kill lands once the replica runs the query
// (system.processes), and the query sleeps on every row (10 s in all), so
// it is still running then.
func TestClusterAReadWhoseReplicaDiesMidQueryIsRetried(t *testing.T) {
	cl := chtest.Cluster(t)
	db := chtest.ClusterDatabase(t, cl)
	ctx := context.Background()
	c := newClusterClient(t, cl, db, []string{cl.Nodes[0][0].Addr()})
	var b pipeline.Batch
	for v := range 20 {
		for i := range 5000 {
			b.Append(pipeline.Row{VariableID: fmt.Sprintf("v%d", v), DeviceID: "d", TsMs: 1_700_000_000_000 + int64(i)*1000, Value: float64(i), Context: "{}"})
		}
	}
	if err := c.Write(ctx, []*pipeline.Batch{&b}); err != nil {
		t.Fatal(err)
	}
	want := localCounts(t, cl, db) // both replicas of each shard hold every row
	var total uint64
	for _, shard := range want {
		for _, k := range shard {
			total += k
		}
	}
	nodes := make([]*Client, len(cl.Nodes[1]))
	for r, n := range cl.Nodes[1] {
		nodes[r] = onNode(t, n, db)
	}
	var errs []error
	killed := make(chan int, 1)
	attempt := 0
	err := c.Retry(ctx, TableDatapoints, func(ctx context.Context) error {
		attempt++
		id := fmt.Sprintf("%s-read-%d", db, attempt)
		if attempt == 1 {
			go func() {
				for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					for r, n := range nodes {
						var k uint64
						if n.Conn().QueryRow(context.Background(), "SELECT count() FROM system.processes WHERE initial_query_id = ? AND NOT is_initial_query", id).Scan(&k) == nil && k > 0 {
							t.Cleanup(func() { _ = cl.Resume(context.Background(), cl.Nodes[1][r]) })
							if err := cl.Nodes[1][r].Kill(); err != nil {
								t.Error(err)
							}
							killed <- r
							return
						}
					}
				}
				killed <- -1
			}()
		}
		var k uint64
		err := c.Conn().QueryRow(clickhouse.Context(ctx, clickhouse.WithQueryID(id)),
			"SELECT count() FROM "+c.Table(TableDatapoints)+" WHERE sleepEachRow(0.0002) = 0 SETTINGS max_block_size = 1000").Scan(&k)
		if err == nil && k != total {
			err = fmt.Errorf("counted %d rows, want %d", k, total)
		}
		errs = append(errs, err)
		return err
	})
	r := <-killed
	if r < 0 {
		t.Fatal("no replica of shard 2 ran the read within a minute")
	}
	t.Logf("replica %d of shard 2 killed mid-read; attempts: %v", r, errs)
	var exc *clickhouse.Exception
	if err != nil || len(errs) < 2 || !errors.As(errs[0], &exc) || exc.Code != 32 {
		t.Fatalf("Retry: %v after %v; want a first attempt failing with code 32 and a retry that reads the %d rows", err, errs, total)
	}
}

// TestClusterAPartLostWithItsReplicasDiskIsGivenUpAfterTheReplicaIsRestoredUnderItsName
// follows what the barrier's error tells an operator whose replica's disk
// is gone: a load held only by its writer, the writer killed, its parts
// deleted (the disk lost), and the replica started again under its name
// with force_restore_data (as chserver's Resume always does, and as
// ClickHouse's recovery after complete data loss asks). 18.16 then drops
// the part from the replica's list in ZooKeeper, finds no replica that has
// it, gives it up as lost, and the sibling's fetch leaves its queue: the
// recompute succeeds again, without those points, which a backfill loads
// again. Before the restore the recompute fails, naming the dead writer.
func TestClusterAPartLostWithItsReplicasDiskIsGivenUpAfterTheReplicaIsRestoredUnderItsName(t *testing.T) {
	cl := chtest.Cluster(t)
	f := newRollupFixture(t, cl, 1)
	ctx := context.Background()
	second, secondRange := f.points(40, 40)
	writer := f.writeToOneReplica(second)
	f.kill(writer)
	f.fetches(1-writer, "START")
	// Until ZooKeeper expires the writer's session it looks up; then the
	// part is held by no replica that is up.
	var lag *LaggingReplicaError
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		err := f.c.AnalystTables().Recompute(ctx, []analyst.Range{secondRange})
		if !errors.As(err, &lag) {
			t.Fatalf("Recompute with %s down: %v; want a *LaggingReplicaError", f.name(writer), err)
		}
		if lag.Unreachable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the part still looks reachable a minute after %s was killed: %v", f.name(writer), err)
		}
	}
	if lag.Writer != f.name(writer) || lag.Replica != f.name(1-writer) {
		t.Fatalf("the error names %s and %s, want the writer %s and its sibling %s: %v", lag.Writer, lag.Replica, f.name(writer), f.name(1-writer), lag)
	}
	t.Logf("with %s down: %v", f.name(writer), lag)
	dir := filepath.Join(f.replicas[writer].Dir(), "data", "data", f.db, TableDatapoints+localSuffix)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != "detached" {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cl.Resume(ctx, f.replicas[writer]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for deadline := start.Add(3 * time.Minute); ; time.Sleep(2 * time.Second) {
		err := f.c.AnalystTables().Recompute(ctx, []analyst.Range{secondRange})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lost part was not given up within 3 minutes of the restore: %v; replication state: %q", err, replicationState(t, f.nodes, f.db))
		}
	}
	t.Logf("the part was given up %s after the restore", time.Since(start).Round(time.Second))
	if got := localCounts(t, cl, f.db)[1][f.id]; got != 40 {
		t.Errorf("the shard holds %d rows of %s, want the first load's 40: the second was lost with the disk", got, f.id)
	}
	syncReplicas(t, cl, f.db, TableDatapoints, TableHourly, TableLatest)
	checkRollupsOf(t, f.c, f.id)
}

// TestClusterVerifyRepairAndRebuildSeeTheirOwnWrites runs the analyst
// tables' check, repair and rebuild (verify --repair, fleetsync rollup)
// through the barrier on the cluster: a corrupted hourly row is found,
// repaired, and the check right after the repair, which must read the
// repair's own rows whichever replica it reaches, finds nothing; a rebuild
// leaves nothing to find either.
func TestClusterVerifyRepairAndRebuildSeeTheirOwnWrites(t *testing.T) {
	cl := chtest.Cluster(t)
	f := newRollupFixture(t, cl, 0)
	ctx := context.Background()
	from, to := rollupHour, rollupHour+hourMs-1
	hourly := f.c.Table(TableHourly)
	// One more point than the hour has, under a newer version: on
	// whichever replica the Distributed table writes it.
	if err := f.c.Conn().Exec(ctx, "INSERT INTO "+hourly+" ("+hourlyColumns+f.c.cluster().keyColumn()+") SELECT variable_id, device_id, hour, count + 1, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms, version + 1"+
		f.c.cluster().keyColumn()+" FROM "+hourly+" FINAL WHERE variable_id = ?", f.id); err != nil {
		t.Fatal(err)
	}
	rep, err := f.c.AnalystTables().CheckRollups(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) != 1 {
		t.Fatalf("the check found %+v, want the corrupted hour of %s", rep.Diffs, f.id)
	}
	if err := f.c.AnalystTables().RepairRollups(ctx, rep.Diffs); err != nil {
		t.Fatal(err)
	}
	if rep, err = f.c.AnalystTables().CheckRollups(ctx, from, to); err != nil || len(rep.Diffs) > 0 {
		t.Fatalf("after the repair the check found %+v (%v)", rep.Diffs, err)
	}
	if n, err := f.c.AnalystTables().Rebuild(ctx, from, to); err != nil || n != 1 {
		t.Fatalf("Rebuild rebuilt %d variables (%v), want 1", n, err)
	}
	if rep, err = f.c.AnalystTables().CheckRollups(ctx, from, to); err != nil || len(rep.Diffs) > 0 || rep.Hours != 1 || rep.Latest != 1 {
		t.Fatalf("after the rebuild the check found %+v over %d hours and %d latest rows (%v)", rep.Diffs, rep.Hours, rep.Latest, err)
	}
	checkRollupsOf(t, f.c, f.id)
}
