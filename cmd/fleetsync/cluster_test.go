//go:build cluster

package main

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// TestClusterTwoShardsStartedTogetherRunAtOnceAndSyncEveryPointOnce is
// done-when 1: both exit 0, every point is in datapoints FINAL (through the
// Distributed table) exactly once, each variable was read by one shard, and
// the logs show the two cycles overlapping. Each shard's first data request
// is held until the other shard has made one (a barrier), so the overlap
// does not depend on the machine's speed; were the shards to exclude each
// other, one would fail on the lease and the other's hold time out.
func TestClusterTwoShardsStartedTogetherRunAtOnceAndSyncEveryPointOnce(t *testing.T) {
	cw := newClusterWorld(t, fleetsim.Options{})
	reading := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var first [2]sync.Once
	cw.handler = func(w http.ResponseWriter, r *http.Request, next http.Handler) {
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
	}
	res := cw.mustSync(cw.config(0, 2, ""), cw.config(1, 2, ""))
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
}
