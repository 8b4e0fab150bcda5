//go:build cluster

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

// TestClusterWithoutInOrderLoadBalancingACycleReadsItsOwnWrites is the
// cluster issue's done-when 3: with the user's profile at ClickHouse's
// default load_balancing (random) instead of in_order, a Distributed read
// may reach either replica of a shard, whichever took the write. Cycles
// that load new and late points must still leave datapoints FINAL, the
// analyst tables and the marks exact: the reads that must see the cycle's
// writes wait for the replicas (readReplicated), so fleetsync no longer
// asks anything of the profile, and does not warn about it. The test
// cluster's profile has in_order; every other cluster test is the other
// way.
func TestClusterWithoutInOrderLoadBalancingACycleReadsItsOwnWrites(t *testing.T) {
	cw := newClusterWorld(t, worldOpts{})
	cw.setLoadBalancing("random")
	t.Cleanup(func() { cw.setLoadBalancing("") })
	cfgs := []string{cw.shardConfig(0, 2, ""), cw.shardConfig(1, 2, "")}
	for i, r := range cw.mustSync(cfgs...) {
		if strings.Contains(r.stderr, "load_balancing") {
			t.Errorf("shard %d speaks of load_balancing, which no longer matters:\n%s", i, lastLines(r.stderr, 5))
		}
	}
	prev := cw.checkExact(map[string]int64{})
	for i, base := range []float64{1000, 2000} {
		cw.addNewPoints(base, true, "")
		cw.mustSync(cfgs...)
		prev = cw.checkExact(prev)
		t.Logf("cycle %d with load_balancing random: exact", i+2)
	}
}

// setLoadBalancing sets the load_balancing of the test cluster's default
// profile on every node through a users.d file, which ClickHouse merges
// into users.xml and reloads within seconds; "" removes the file, back to
// the cluster's in_order. It waits until a new session on every node has
// the value.
func (cw *world) setLoadBalancing(mode string) {
	cw.t.Helper()
	want := mode
	if mode == "" {
		want = "in_order"
	}
	var nodes []*chserver.Server
	for _, shard := range cw.cl.Nodes {
		nodes = append(nodes, shard...)
	}
	for _, n := range nodes {
		dir := filepath.Join(n.Dir(), "users.d")
		file := filepath.Join(dir, "load-balancing.xml")
		var err error
		if mode == "" {
			err = os.Remove(file)
		} else if err = os.MkdirAll(dir, 0o755); err == nil {
			err = os.WriteFile(file, []byte(`<?xml version="1.0"?>
<yandex><profiles><default><load_balancing replace="replace">`+mode+`</load_balancing></default></profiles></yandex>
`), 0o644)
		}
		if err != nil {
			cw.t.Fatalf("load_balancing %q on %s: %v", mode, n.Addr(), err)
		}
	}
	for _, n := range nodes {
		deadline := time.Now().Add(time.Minute)
		for {
			got, err := loadBalancing(n)
			if err == nil && got == want {
				break
			}
			if time.Now().After(deadline) {
				cw.t.Fatalf("%s: load_balancing is %q (%v) a minute after the profile set %q", n.Addr(), got, err, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// loadBalancing is the load_balancing of a new session of the default user
// on node n.
func loadBalancing(n *chserver.Server) (string, error) {
	conn, err := nodeConn(n)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var v string
	err = conn.QueryRow(context.Background(), "SELECT value FROM system.settings WHERE name = 'load_balancing'").Scan(&v)
	return v, err
}
