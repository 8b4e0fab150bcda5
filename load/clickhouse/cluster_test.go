//go:build cluster

package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// onSharedCluster is a migrated client of a fresh database on the shared
// cluster.
func onSharedCluster(t *testing.T) (*chserver.Cluster, string, *Client) {
	t.Helper()
	cl := chtest.Cluster(t)
	db := chtest.ClusterDatabase(t, cl)
	return cl, db, newClusterClient(t, cl, db, nil)
}

// newClusterClient opens a client on a fresh database of the shared cluster,
// connected to addrs (every node when nil), and migrates it.
func newClusterClient(t *testing.T, cl *chserver.Cluster, db string, addrs []string) *Client {
	t.Helper()
	if addrs == nil {
		addrs = cl.Addrs()
	}
	c, err := Open(context.Background(), Config{Addr: addrs, Database: db, Cluster: cl.Name(), MaxElapsed: time.Minute}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Schema().Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate on the cluster: %v", err)
	}
	return c
}

// onNode opens a plain client on one node, for looking at its local tables.
func onNode(t *testing.T, n *chserver.Server, db string) *Client {
	t.Helper()
	c, err := Open(context.Background(), Config{Addr: []string{n.Addr()}, Database: db}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func nodeTables(t *testing.T, n *Client) map[string]string {
	t.Helper()
	engines, err := n.Schema().tableEngines(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return engines
}

func TestClusterMigrateCreatesEveryTableOnEveryNodeAndTwiceChangesNothing(t *testing.T) {
	cl, db, c := onSharedCluster(t)
	ctx := context.Background()
	ddl := func() map[string]string {
		out := map[string]string{}
		for s, shard := range cl.Nodes {
			for r, node := range shard {
				n := onNode(t, node, db)
				engines := nodeTables(t, n)
				for _, td := range schema {
					local := td.name
					if sharded(td) {
						if e := engines[td.name]; e != "Distributed" {
							t.Errorf("shard %d replica %d: %s has engine %q, want Distributed", s, r, td.name, e)
						}
						local = td.name + localSuffix
					}
					if e := engines[local]; !strings.HasPrefix(e, "Replicated") {
						t.Errorf("shard %d replica %d: %s has engine %q, want a Replicated one", s, r, local, e)
					}
					for _, name := range []string{td.name, td.name + localSuffix} {
						var text string
						if err := n.Conn().QueryRow(ctx, "SHOW CREATE TABLE `"+db+"`.`"+name+"`").Scan(&text); err == nil {
							out[fmt.Sprintf("%d/%d %s", s, r, name)] = text
						}
					}
				}
			}
		}
		var rows uint64
		if err := c.Conn().QueryRow(ctx, "SELECT count() FROM "+c.Table(TableSchemaMigrations)).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		out["schema_migrations rows"] = fmt.Sprint(rows)
		return out
	}
	before := ddl()
	if before["schema_migrations rows"] != "1" {
		t.Errorf("schema_migrations holds %s rows, want 1", before["schema_migrations rows"])
	}
	if err := c.Schema().Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if err := c.Schema().EnsureSchema(ctx); err != nil {
		t.Fatalf("EnsureSchema after Migrate: %v", err)
	}
	after := ddl()
	for k, b := range before {
		if after[k] != b {
			t.Errorf("%s changed by the second Migrate:\nbefore: %s\nafter:  %s", k, b, after[k])
		}
	}
}

func TestClusterMigrateRefusesToMixSingleServerAndClusterTables(t *testing.T) {
	cl := chtest.Cluster(t)
	ctx := context.Background()

	// A single-server database on one node, then clickhouse.cluster set.
	single := chtest.ClusterDatabase(t, cl)
	plain, err := Open(ctx, Config{Addr: []string{cl.Nodes[0][0].Addr()}, Database: single}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Schema().Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clustered, err := Open(ctx, Config{Addr: []string{cl.Nodes[0][0].Addr()}, Database: single, Cluster: cl.Name()}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer clustered.Close()
	var le *LayoutError
	for name, fn := range map[string]func(context.Context) error{"Migrate": clustered.Schema().Migrate, "EnsureSchema": clustered.Schema().EnsureSchema} {
		err := fn(ctx)
		if !errors.As(err, &le) || !strings.Contains(err.Error(), "clickhouse.cluster") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s with a cluster over single-server tables: %v, want a one-line *LayoutError naming clickhouse.cluster", name, err)
		}
	}

	// A cluster database, then clickhouse.cluster left empty.
	db := chtest.ClusterDatabase(t, cl)
	newClusterClient(t, cl, db, nil)
	unset, err := Open(ctx, Config{Addr: []string{cl.Nodes[1][0].Addr()}, Database: db}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer unset.Close()
	if err := unset.Schema().Migrate(ctx); !errors.As(err, &le) || !strings.Contains(err.Error(), "clickhouse.cluster is empty") {
		t.Errorf("Migrate without a cluster over cluster tables: %v, want a *LayoutError saying clickhouse.cluster is empty", err)
	}
}

// pointsOf is n points of each of vars variables, version-free.
func pointsOf(vars, n int) *pipeline.Batch {
	var b pipeline.Batch
	for v := range vars {
		for i := range n {
			b.Append(pipeline.Row{VariableID: fmt.Sprintf("var-%02d", v), DeviceID: "dev", TsMs: int64(1_700_000_000_000 + i*1000), Value: float64(v*1000 + i), Context: "{}"})
		}
	}
	return &b
}

// localCounts is, per shard, the variables in its local datapoints table
// with their raw (unmerged) row counts, once every replica of the shard
// holds the same (replication is asynchronous); a shard whose replicas
// still differ after 60s fails the test with their replication state.
func localCounts(t *testing.T, cl *chserver.Cluster, db string) []map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	read := func(n *Client) map[string]uint64 {
		got := map[string]uint64{}
		rows, err := n.Conn().Query(ctx, "SELECT variable_id, count() FROM `"+db+"`.`datapoints_local` GROUP BY variable_id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var c uint64
			if err := rows.Scan(&id, &c); err != nil {
				t.Fatal(err)
			}
			got[id] = c
		}
		return got
	}
	out := make([]map[string]uint64, len(cl.Nodes))
	for s, shard := range cl.Nodes {
		clients := make([]*Client, len(shard))
		for r, node := range shard {
			clients[r] = onNode(t, node, db)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			per := make([]map[string]uint64, len(shard))
			same := true
			for r, c := range clients {
				per[r] = read(c)
				same = same && fmt.Sprint(per[r]) == fmt.Sprint(per[0])
			}
			if same {
				out[s] = per[0]
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("shard %d: replicas hold %v after 60s; replication state: %q", s, per, replicationState(t, clients, db))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return out
}

// replicationState describes the replicas' parts, queues and ZooKeeper
// sessions, for a failure message.
func replicationState(t *testing.T, clients []*Client, db string) []string {
	t.Helper()
	var out []string
	for i, c := range clients {
		for _, q := range []string{
			"SELECT concat('part ', table, ' ', name, ' rows ', toString(rows), ' active ', toString(active)) FROM system.parts WHERE database = '" + db + "' AND table = 'datapoints_local'",
			"SELECT concat('queue ', table, ' ', type, ' ', new_part_name, ' tries ', toString(num_tries), ': ', last_exception) FROM system.replication_queue",
			"SELECT concat('replica ', table, ' readonly ', toString(is_readonly), ' expired ', toString(is_session_expired), ' queue ', toString(queue_size)) FROM system.replicas WHERE database = '" + db + "' AND table = 'datapoints_local'",
		} {
			rows, err := c.Conn().Query(context.Background(), q)
			if err != nil {
				out = append(out, fmt.Sprintf("r%d: %v", i, err))
				continue
			}
			for rows.Next() {
				var line string
				_ = rows.Scan(&line)
				out = append(out, fmt.Sprintf("r%d %s", i, line))
			}
			rows.Close()
		}
	}
	return out
}

func TestClusterWritesKeepEachVariableOnOneShardAndNeverTakeAReReadForARetry(t *testing.T) {
	cl, db, c := onSharedCluster(t)
	ctx := context.Background()
	b := pointsOf(20, 50)
	if err := c.Write(ctx, []*pipeline.Batch{b}); err != nil {
		t.Fatal(err)
	}
	// A re-read (the same rows, a new version), sent twice as an identical
	// retry after a lost acknowledgement would be: the re-read must not be
	// taken for a duplicate of the first write, and the retry must be
	// harmless. ClickHouse 18.16 usually drops the identical block (replicated
	// deduplication), but not always on the shard local to the node
	// receiving the insert; FINAL collapses it either way.
	version := c.NextVersion()
	sc := new(scratch)
	place, err := c.cluster().placementFor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.insertPoints(ctx, []*pipeline.Batch{b}, version, place, sc); err != nil {
			t.Fatal(err)
		}
	}
	counts := localCounts(t, cl, db)
	seen := map[string]int{}
	total := uint64(0)
	for s, m := range counts {
		for id, n := range m {
			if prev, ok := seen[id]; ok {
				t.Errorf("%s has rows on shards %d and %d; all rows of a variable belong on one shard", id, prev, s)
			}
			seen[id] = s
			total += n
			if n != 100 && n != 150 {
				t.Errorf("%s: %d raw rows on shard %d, want 100 (the write and the re-read; the retry deduplicated) or 150 (the retry kept)", id, n, s)
			}
		}
	}
	if len(seen) != 20 {
		t.Errorf("%d variables across shards; want 20", len(seen))
	}
	if total == 3000 {
		t.Logf("the identical retry was kept on every shard (no replicated deduplication)")
	}
	// Both versions are there: the re-read was not deduplicated away.
	var versions uint64
	if err := c.Conn().QueryRow(ctx, "SELECT uniqExact(version) FROM "+c.Table(TableDatapoints)).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != 2 {
		t.Errorf("datapoints holds %d versions, want 2 (the write and the re-read)", versions)
	}
	if len(counts[0]) == 0 || len(counts[1]) == 0 {
		t.Errorf("rows per shard %v; want both shards used", counts)
	}
	var final uint64
	if err := c.Conn().QueryRow(ctx, "SELECT count() FROM "+c.Table(TableDatapoints)+" FINAL").Scan(&final); err != nil {
		t.Fatal(err)
	}
	if final != 1000 {
		t.Errorf("datapoints FINAL through the Distributed table: %d rows, want 1000", final)
	}
}
