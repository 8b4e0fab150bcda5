package chtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

// sharedCluster is the one local ClickHouse cluster per test process, like
// shared: starting ZooKeeper and four servers costs many seconds.
var sharedCluster struct {
	once sync.Once
	mu   sync.Mutex
	c    *chserver.Cluster
	err  error
}

// Cluster returns the test process's local cluster (ZooKeeper and 2 shards
// of 2 replicas, named "fleet"), started on first use and kept until
// StopCluster. A cluster that cannot be started fails the test. Tests that
// kill a node resume it before they end.
func Cluster(tb testing.TB) *chserver.Cluster {
	tb.Helper()
	sharedCluster.once.Do(func() {
		c, err := chserver.StartCluster(context.Background(), chserver.ClusterOptions{})
		sharedCluster.mu.Lock()
		sharedCluster.c, sharedCluster.err = c, err
		sharedCluster.mu.Unlock()
	})
	sharedCluster.mu.Lock()
	defer sharedCluster.mu.Unlock()
	if sharedCluster.err != nil {
		tb.Fatalf("start the test ClickHouse cluster: %v", sharedCluster.err)
	}
	// A test that killed a server and failed before it was back must not
	// fail the tests after it: every test starts on a whole cluster.
	for _, shard := range sharedCluster.c.Nodes {
		for _, n := range shard {
			if n.PID() != 0 {
				continue
			}
			if err := sharedCluster.c.Resume(context.Background(), n); err != nil {
				tb.Fatalf("restart the test cluster's server on %s, down since an earlier test: %v", n.Addr(), err)
			}
		}
	}
	return sharedCluster.c
}

// StopCluster stops the cluster Cluster started, if any; call it from
// TestMain beside StopShared.
func StopCluster() {
	sharedCluster.mu.Lock()
	c := sharedCluster.c
	sharedCluster.c = nil
	sharedCluster.mu.Unlock()
	if c != nil {
		_ = c.Stop()
	}
}

// ClusterDatabase returns a fresh database name for one test on c, and
// drops that database from every node (ON CLUSTER) when the test ends.
// The database itself is left to the code under test to create.
func ClusterDatabase(tb testing.TB, c *chserver.Cluster) string {
	tb.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("random database name: %v", err)
	}
	name := "test_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		for _, addr := range c.Addrs() {
			// Each node on its own: an ON CLUSTER drop would wait for a
			// node a test left stopped.
			if err := execOn(addr, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
				tb.Logf("drop test database %s on %s: %v", name, addr, err)
			}
		}
	})
	return name
}
