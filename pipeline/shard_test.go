package pipeline

import (
	"fmt"
	"testing"
)

func TestShardLeaseNameKeepsTheUnshardedNameAndNamesTheIndex(t *testing.T) {
	for _, tt := range []struct {
		index, count int
		want         string
	}{{0, 1, "sync"}, {0, 0, "sync"}, {0, 2, "sync/shard-0"}, {2, 3, "sync/shard-2"}, {2, 4, "sync/shard-2"}} {
		if got := (Shard{Index: tt.index, Count: tt.count}).LeaseName(); got != tt.want {
			t.Errorf("Shard{%d, %d}.LeaseName() = %q, want %q", tt.index, tt.count, got, tt.want)
		}
	}
}

// Every variable is held by exactly the shard ShardOf names, the hash is
// the one earlier releases used (a variable must not change shard on an
// upgrade), and only shard 0 writes the metadata.
func TestShardsSplitTheVariablesOnceByAStableHash(t *testing.T) {
	for _, count := range []int{0, 1, 2, 3, 7} {
		per := make([]int, max(count, 1))
		for v := 0; v < 1000; v++ {
			id := fmt.Sprintf("%024x", v*7919)
			holders := 0
			for i := 0; i < max(count, 1); i++ {
				if (Shard{Index: i, Count: count}).Holds(id) {
					holders++
					if got := ShardOf(id, count); got != i {
						t.Fatalf("count %d: %s held by shard %d, ShardOf says %d", count, id, i, got)
					}
					per[i]++
				}
			}
			if holders != 1 {
				t.Fatalf("count %d: %s held by %d shards", count, id, holders)
			}
		}
		for i, n := range per {
			if count > 1 && (n < 1000/count/2 || n > 2*1000/count) {
				t.Errorf("count %d: shard %d holds %d of 1000 variables", count, i, n)
			}
		}
	}
	// FNV-1a 32 of "a" is 0xe40c292c: 3826002220 % 3 = 1.
	if got := ShardOf("a", 3); got != 1 {
		t.Errorf("ShardOf(%q, 3) = %d, want 1 (the hash changed: variables would move shards on upgrade)", "a", got)
	}
	if !(Shard{Index: 0, Count: 3}).WritesMetadata() || (Shard{Index: 1, Count: 3}).WritesMetadata() || !(Shard{}).WritesMetadata() {
		t.Error("only shard 0 (or an unsharded instance) writes the metadata")
	}
}
