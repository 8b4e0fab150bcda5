package chtest

import (
	"context"
	"testing"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

// sharedCluster is the test process's one local cluster.
var sharedCluster perProcess[*chserver.Cluster]

// Cluster returns the test process's local cluster (ZooKeeper and 2 shards
// of 2 replicas, named "fleet"), started on first use and kept until
// StopCluster. A cluster that cannot be started fails the test. Tests that
// kill a node resume it before they end.
func Cluster(tb testing.TB) *chserver.Cluster {
	tb.Helper()
	c := sharedCluster.get(tb, "test ClickHouse cluster", func() (*chserver.Cluster, error) {
		return chserver.StartCluster(context.Background(), chserver.ClusterOptions{})
	})
	// A test that killed a server and failed before it was back must not
	// fail the tests after it: every test starts on a whole cluster.
	for _, shard := range c.Nodes {
		for _, n := range shard {
			if n.PID() != 0 {
				continue
			}
			if err := c.Resume(context.Background(), n); err != nil {
				tb.Fatalf("restart the test cluster's server on %s, down since an earlier test: %v", n.Addr(), err)
			}
		}
	}
	// Nor a server whose DDL worker an earlier test's ALTER ... ON CLUSTER
	// left dead (a race inside ClickHouse 18.16, see HealDDLWorkers).
	healed, err := c.HealDDLWorkers(context.Background())
	if err != nil {
		tb.Fatalf("restart the test cluster's servers whose DDL worker died: %v", err)
	}
	if len(healed) > 0 {
		tb.Logf("restarted %v: ClickHouse's DDL worker had died there in an earlier test", healed)
	}
	return c
}

// StopCluster stops the cluster Cluster started, if any; call it from
// TestMain beside StopShared.
func StopCluster() { sharedCluster.stop() }

// StartCluster starts a local cluster of the test's own, for a test that
// grows, rebuilds or names it differently from the shared one, and stops
// it when the test ends.
func StartCluster(tb testing.TB, opts chserver.ClusterOptions) *chserver.Cluster {
	tb.Helper()
	return own(tb, "ClickHouse cluster", func(ctx context.Context) (*chserver.Cluster, error) { return chserver.StartCluster(ctx, opts) })
}

// ClusterDatabase returns a fresh database name for one test on c, and
// drops that database from every node when the test ends. The database
// itself is left to the code under test to create.
func ClusterDatabase(tb testing.TB, c *chserver.Cluster) string {
	tb.Helper()
	name := databaseName(tb)
	tb.Cleanup(func() {
		for _, addr := range c.Addrs() {
			// Each node on its own: an ON CLUSTER drop would wait for a
			// node a test left stopped.
			if err := execOn(addr, nil, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
				tb.Logf("drop test database %s on %s: %v", name, addr, err)
			}
		}
	})
	return name
}
