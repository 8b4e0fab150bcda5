//go:build cluster

package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

// TestClusterTwoShardsStartedTogetherRunAtOnceAndSyncEveryPointOnce is
// done-when 1: both exit 0, every point is in datapoints FINAL (through the
// Distributed table) exactly once, each variable was read by one shard, and
// the logs show the two cycles overlapping. Each shard's first data request
// is held until the other shard has made one (a barrier), so the overlap
// does not depend on the machine's speed; were the shards to exclude each
// other, one would fail on the lease and the other's hold time out.
func TestClusterTwoShardsStartedTogetherRunAtOnceAndSyncEveryPointOnce(t *testing.T) {
	cw := newClusterWorld(t, worldOpts{})
	reading := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var first [2]sync.Once
	cw.gate.setHook(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if strings.HasPrefix(r.URL.Path, "/api/v1.6/data/") {
			for i := range 2 {
				if r.Header.Get("X-Auth-Token") == shardToken(i) {
					first[i].Do(func() {
						close(reading[i])
						select {
						case <-reading[1-i]:
						case <-time.After(2 * time.Minute):
						}
					})
				}
			}
		}
		next.ServeHTTP(w, r)
	})
	res := cw.mustSync(cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, ""))
	cw.settle()
	cw.checkOracle()

	s0, e0, sum0 := cycleSpan(t, res[0].stderr)
	s1, e1, sum1 := cycleSpan(t, res[1].stderr)
	if !(s0.Before(e1) && s1.Before(e0)) {
		t.Errorf("the cycles did not overlap: shard 0 ran %s to %s, shard 1 %s to %s", s0, e0, s1, e1)
	}
	t.Logf("shard 0 ran %s-%s, shard 1 %s-%s", s0.Format("15:04:05.000"), e0.Format("15:04:05.000"), s1.Format("15:04:05.000"), e1.Format("15:04:05.000"))
	vars := 0
	for _, d := range cw.sim.Devices() {
		vars += len(d.Variables)
	}
	if sum0.Read == 0 || sum1.Read == 0 || int(sum0.Read+sum1.Read) != vars {
		t.Errorf("shards read %v and %v variables, want both some and %d in all (each variable by one shard)", sum0.Read, sum1.Read, vars)
	}
	for i, r := range res {
		for _, l := range shardLogLines(t, r.stderr) {
			if l.ShardIndex == nil || *l.ShardIndex != i {
				t.Fatalf("shard %d logged a line without its shard_index: %+v", i, l)
			}
		}
	}
	// status, from either shard's configuration, shows every shard.
	code, out, errs := cw.cli(context.Background(), "status", "--config", cw.shardConfig(1, 2, ""), "--limit", "0")
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, lastLines(errs, 5))
	}
	for i, want := range []float64{sum0.Read, sum1.Read} {
		line := fmt.Sprintf("shard %d of 2: %d variables, %d with a mark", i, int(want), int(want))
		if !strings.Contains(out, line) {
			t.Errorf("status lacks %q:\n%s", line, out)
		}
	}
}

// slowFleet is a fleet whose cycle takes seconds (many small requests, each
// delayed), so that a test can act in the middle of it.
func slowFleet() fleetsim.Options {
	return fleetsim.Options{Devices: 6, Variables: 4, Points: 1500, Span: 20 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 20 * time.Millisecond}}
}

const slowSync = "rows_per_request: 400\nvariables_per_request: 3\nmax_in_flight: 2\nbatch_rows: 2000"

// awaitRows polls until some points have landed (the cycles are under way).
func (w *world) awaitRows(done <-chan struct{}) {
	w.t.Helper()
	poll(w.t, 2*time.Minute, "a point to land", func() bool {
		select {
		case <-done:
			w.t.Fatal("the sync finished before any point was seen loaded")
		default:
		}
		var n uint64
		err := w.conn.QueryRow(context.Background(), "SELECT count() FROM `"+w.db+"`.datapoints").Scan(&n)
		return err == nil && n > 0
	})
}

// TestClusterTwoPodsOfOneIndexNeverDuplicateNorMoveAMarkBack is done-when
// 2: two processes of shard 0 at once (and shard 1 beside them): each of
// them exits 0 or steps aside on the lease; no point is duplicated under
// FINAL, no mark moves backwards, and the next cycle is exact.
func TestClusterTwoPodsOfOneIndexNeverDuplicateNorMoveAMarkBack(t *testing.T) {
	cw := newClusterWorld(t, worldOpts{sim: slowFleet()})
	cfg0, cfg1 := cw.shardConfig(0, 2, slowSync), cw.shardConfig(1, 2, slowSync)
	procs := []*proc{
		startBinary(t, nil, "sync", "--config", cfg0),
		startBinary(t, nil, "sync", "--config", cfg0),
		startBinary(t, nil, "sync", "--config", cfg1),
	}
	stepped := 0
	for i, p := range procs {
		code := p.wait(t, 5*time.Minute)
		switch {
		case code == 0:
		case code == 1 && i < 2 && strings.Contains(p.stderr.String(), "another sync is running"):
			stepped++
		default:
			t.Fatalf("process %d exited %d; its log ends:\n%s", i, code, lastLines(p.stderr.String(), 15))
		}
	}
	t.Logf("%d of the two shard-0 processes stepped aside", stepped)
	cw.settle()
	prev := cw.checkMarksCovered(map[string]int64{})
	cw.loaded() // fails on a duplicate under FINAL
	cw.mustSync(cfg0, cfg1)
	cw.settle()
	cw.checkMarksCovered(prev)
	cw.checkOracle()
}

// TestClusterShardCountChangeFromTwoToThreeStaysExact is done-when 3: new
// and late points between a cycle of 2 shards and one of 3.
func TestClusterShardCountChangeFromTwoToThreeStaysExact(t *testing.T) {
	cw := newClusterWorld(t, worldOpts{})
	cw.mustSync(cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, ""))
	cw.settle()
	prev := cw.checkMarksCovered(map[string]int64{})
	if added := cw.addNewPoints(1000, true, "new"); len(added) == 0 {
		t.Fatal("the fleet has no variable to add points to")
	}
	// The third shard takes its index from an Indexed Job's environment;
	// the others' files set theirs, which wins over it.
	res := cw.syncShards([]string{"JOB_COMPLETION_INDEX=2"}, cw.shardConfig(0, 3, ""), cw.shardConfig(1, 3, ""), cw.shardConfig(-1, 3, ""))
	for i, r := range res {
		if r.code != 0 {
			t.Fatalf("shard %d of 3 exited %d; its log ends:\n%s", i, r.code, lastLines(r.stderr, 15))
		}
		for _, l := range shardLogLines(t, r.stderr) {
			if l.ShardIndex == nil || *l.ShardIndex != i {
				t.Fatalf("shard run %d logged as shard %v, want %d: %+v", i, l.ShardIndex, i, l)
			}
		}
	}
	cw.settle()
	cw.checkMarksCovered(prev)
	cw.checkOracle()
}

// TestClusterReplicaKilledMidCycleThenRestartedCatchesUp is done-when 4,
// in the two cases a replica's death leaves, each made certain rather than
// left to timing (issue 24, case 5):
//
//   - its sibling holds every part it had: the kill lands at the second
//     cycle's first data request, right after SYSTEM SYNC REPLICA on the
//     sibling. Cycles with the replica down succeed and are exact.
//   - it holds parts its sibling lacks: the sibling may not fetch (SYSTEM
//     STOP FETCHES) when the cycle loads, and the replica that took the
//     load is killed while the cycle's commit waits for the sibling. The
//     analyst tables cannot then be recomputed exactly, so the cycle fails
//     with one line naming the shard, the dead replica, the part and the
//     fix, and writes no mark past what the sibling holds; once the replica
//     is back, the next cycle succeeds, and points, analyst tables and
//     marks are exact.
func TestClusterReplicaKilledMidCycleThenRestartedCatchesUp(t *testing.T) {
	t.Run("sibling holds every part", func(t *testing.T) {
		cw := newClusterWorld(t, worldOpts{})
		cfgs := []string{cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, "")}
		cw.mustSync(cfgs...)
		victim, sibling := cw.cl.Nodes[1][0], cw.cl.Nodes[1][1]
		t.Cleanup(func() { _ = cw.cl.Resume(context.Background(), victim) })
		var killed sync.Once
		cw.gate.setHook(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
			if strings.HasPrefix(r.URL.Path, "/api/v1.6/data/") {
				killed.Do(func() {
					cw.onNode(sibling, "SYSTEM SYNC REPLICA `"+cw.db+"`.datapoints_local")
					if err := victim.Kill(); err != nil {
						t.Error(err)
					}
				})
			}
			next.ServeHTTP(w, r)
		})
		prev := cw.checkMarksCovered(map[string]int64{})
		cw.addNewPoints(1000, true, "")
		cw.mustSync(cfgs...)
		if victim.PID() != 0 {
			t.Fatal("the second cycle made no data request, so the replica was never killed")
		}
		prev = cw.checkExact(prev)
		// And the next cycle too, the replica still down.
		cw.gate.setHook(nil)
		cw.addNewPoints(2000, true, "")
		cw.mustSync(cfgs...)
		cw.checkExact(prev)
	})
	t.Run("replica down holds parts its sibling lacks", func(t *testing.T) {
		cw := newClusterWorld(t, worldOpts{})
		cfgs := []string{cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, "")}
		cw.mustSync(cfgs...)
		prev := cw.checkExact(map[string]int64{})
		shard := cw.cl.Nodes[1]
		before := make([]uint64, len(shard))
		for r, n := range shard {
			var err error
			if before[r], err = cw.localRows(n); err != nil {
				t.Fatal(err)
			}
			cw.onNode(n, "SYSTEM STOP FETCHES `"+cw.db+"`.datapoints_local")
		}
		t.Cleanup(func() {
			for _, n := range shard {
				if n.PID() != 0 {
					cw.onNode(n, "SYSTEM START FETCHES `"+cw.db+"`.datapoints_local")
				}
			}
		})
		// New points only: a late one below a mark is not loaded until
		// a cycle succeeds, which the check of the marks after the failed
		// cycle would take for a loss.
		cw.addNewPoints(1000, false, "")
		done := make(chan struct{})
		var res []shardRun
		go func() { defer close(done); res = cw.syncShards(nil, cfgs...) }()
		// The replica that takes the shard's load holds it alone; the
		// cycle's commit waits for the other, which may not fetch it.
		writer := -1
		for deadline := time.Now().Add(2 * time.Minute); writer < 0; time.Sleep(20 * time.Millisecond) {
			for r, n := range shard {
				if k, err := cw.localRows(n); err == nil && k > before[r] {
					writer = r
				}
			}
			select {
			case <-done:
				t.Fatalf("the cycle ended before shard 2 took a load: %+v", res)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("shard 2 took no load within 2 minutes")
			}
		}
		victim, sibling := shard[writer], shard[1-writer]
		name := cw.macro(victim, "replica")
		t.Cleanup(func() { _ = cw.cl.Resume(context.Background(), victim) })
		if err := victim.Kill(); err != nil {
			t.Fatal(err)
		}
		cw.onNode(sibling, "SYSTEM START FETCHES `"+cw.db+"`.datapoints_local")
		<-done
		failed := 0
		for i, r := range res {
			if r.code == 0 {
				continue
			}
			failed++
			last := lastLines(r.stderr, 1)
			t.Logf("shard %d, %s down: %s", i, name, last)
			if !strings.HasPrefix(last, "fleetsync sync: ") || !strings.Contains(last, "is held only by replica "+name+", which is down") ||
				!strings.Contains(last, "start "+name) || !strings.Contains(last, "fleetsync backfill --from ") {
				t.Errorf("shard %d exited %d; want its last line to name the part held only by %s and the fix:\n%s", i, r.code, name, lastLines(r.stderr, 5))
			}
		}
		if failed == 0 {
			// The checks below show what that cost.
			t.Errorf("every shard succeeded though %s, down, held parts its sibling lacked: the analyst tables were recomputed without them", name)
		}
		// No mark passed a point the sibling lacks.
		after := cw.checkMarksCovered(prev)
		moved := 0
		for id, m := range after {
			if m > prev[id] {
				moved++
			}
		}
		t.Logf("%d of %d marks moved in the failed cycle", moved, len(after))
		prev = after
		if err := cw.cl.Resume(context.Background(), victim); err != nil {
			t.Fatal(err)
		}
		cw.mustSync(cfgs...)
		cw.checkExact(prev)
	})
}

// TestClusterShardKilledMidCycleThenRerunIsExact is done-when 5.
func TestClusterShardKilledMidCycleThenRerunIsExact(t *testing.T) {
	cw := newClusterWorld(t, worldOpts{sim: slowFleet()})
	cfg0, cfg1 := cw.shardConfig(0, 2, slowSync), cw.shardConfig(1, 2, slowSync)
	p0 := startBinary(t, nil, "sync", "--config", cfg0)
	p1 := startBinary(t, nil, "sync", "--config", cfg1)
	cw.awaitRows(p0.done)
	p0.kill()
	if code := p1.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("shard 1 exited %d while shard 0 was killed; its log ends:\n%s", code, lastLines(p1.stderr.String(), 15))
	}
	cw.settle()
	prev := cw.checkMarksCovered(map[string]int64{})
	// The killed shard's lease names a dead process of this host: the rerun
	// takes it over at once.
	cw.mustSync(cfg0)
	cw.settle()
	cw.checkMarksCovered(prev)
	cw.checkOracle()
}

// TestClusterMigrateTwiceAndReadmeQueriesMatchOneServer is done-when 6:
// `fleetsync migrate` against the cluster creates every table on every
// node, a second run changes nothing, and the README's queries return the
// same through the cluster as on one server synced from the same fleet.
func TestClusterMigrateTwiceAndReadmeQueriesMatchOneServer(t *testing.T) {
	cw := newClusterWorld(t, worldOpts{})
	cfg0, cfg1 := cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, "")
	tables := func() map[string]string {
		out := map[string]string{}
		for s, shard := range cw.cl.Nodes {
			for r, n := range shard {
				conn := openConn(t, n)
				rows, err := conn.Query(context.Background(), "SELECT name, engine, create_table_query FROM system.tables WHERE database = ?", cw.db)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var name, engine, ddl string
					if err := rows.Scan(&name, &engine, &ddl); err != nil {
						t.Fatal(err)
					}
					out[fmt.Sprintf("%d/%d %s", s, r, name)] = engine + " " + ddl
				}
				rows.Close()
			}
		}
		return out
	}
	for i := range 2 {
		if code, out, errs := cw.cli(context.Background(), "migrate", "--config", cfg0); code != 0 {
			t.Fatalf("migrate %d exited %d: %s %s", i+1, code, out, lastLines(errs, 5))
		}
	}
	before := tables()
	// Every table of the contract, on every node.
	for _, name := range []string{"datapoints", "devices", "variables", "sync_state", "sync_lease", "organizations", "device_groups",
		"device_group_members", "device_group_member_changes", "event_logs", "event_state", "schema_migrations"} {
		for s, shard := range cw.cl.Nodes {
			for r := range shard {
				if _, ok := before[fmt.Sprintf("%d/%d %s", s, r, name)]; !ok {
					t.Errorf("node %d/%d lacks table %s after migrate", s, r, name)
				}
			}
		}
	}
	if code, _, errs := cw.cli(context.Background(), "migrate", "--config", cfg1); code != 0 {
		t.Fatalf("third migrate exited %d: %s", code, lastLines(errs, 5))
	}
	after := tables()
	for k, b := range before {
		if after[k] != b {
			t.Errorf("%s changed by another migrate:\nbefore: %s\nafter:  %s", k, b, after[k])
		}
	}
	if len(after) != len(before) {
		t.Errorf("another migrate changed the number of tables from %d to %d", len(before), len(after))
	}

	// The same fleet into one server.
	one := cw.oneServerSync(chtest.Shared(t))
	syncStart := time.Now().Add(-time.Second).Truncate(time.Second)
	cw.mustSync(cfg0, cfg1, one.cfg)
	syncEnd := time.Now()
	cw.settle()
	cw.checkOracle()
	cw.checkReadmeQueries(one, syncStart, syncEnd)
}
