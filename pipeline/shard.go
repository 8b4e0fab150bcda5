package pipeline

import (
	"fmt"
	"hash/fnv"
)

// Shard is one of the sync shards that split an account's variables
// (sync.shard_index of sync.shard_count): which variables it reads, the
// lease it takes and whether it writes the fleet's metadata are all
// decided here. Parsing and validating the two settings is config's
// (config/shard.go); naming the shard in logs and metrics is cmd's.
type Shard struct {
	Index, Count int
}

// Name is the shard's name where a deployment's shards keep one row each
// (the settled watermark's scope): "" when the variables are not split,
// else "shard <index> of <count>".
func (s Shard) Name() string {
	if !s.Sharded() {
		return ""
	}
	return fmt.Sprintf("shard %d of %d", s.Index, s.Count)
}

// Sharded reports whether the variables are split at all: a Count of 0
// or 1 means one instance reads every variable.
func (s Shard) Sharded() bool { return s.Count > 1 }

// Holds reports whether the shard reads the variable. The hash is stable
// across releases and processes, so a variable never changes shard
// unless the shard count changes.
func (s Shard) Holds(variableID string) bool {
	return !s.Sharded() || ShardOf(variableID, s.Count) == s.Index
}

// ShardOf is the index of the shard, of count, that reads the variable:
// FNV-1a of its id modulo count (0 when count is 0 or 1).
func ShardOf(variableID string, count int) int {
	if count <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(variableID))
	return int(h.Sum32() % uint32(count))
}

// unshardedLease is the lease of an unsharded deployment: one sync cycle
// at a time may write a warehouse.
const unshardedLease = "sync"

// LeaseName is the name of the lease the shard's cycles take: two
// instances of one index exclude each other, instances of different
// indexes never do. An unsharded deployment keeps the one lease it
// always had.
//
// The name holds the index only, not the count: while shard_count changes
// (old and new instances overlapping) shard 0 of 2 and shard 0 of 3 still
// exclude each other, and instances whose variables overlap without
// excluding each other are safe anyway: datapoints FINAL counts a point
// loaded twice once, and marks only move forward.
func (s Shard) LeaseName() string {
	if !s.Sharded() {
		return unshardedLease
	}
	return fmt.Sprintf("%s/shard-%d", unshardedLease, s.Index)
}

// WritesMetadata reports whether the shard writes the shared metadata
// tables (devices, variables, groups, organizations) and the event logs.
// Shard 0 alone does: every shard walks the metadata anyway to find its
// variables, but writing it from every shard would multiply those writes
// and the event-log requests by the shard count, all against the one
// rate limit of a shared token, and the event logs have one mark per
// event, not per variable, so shards would only redo each other's work.
// The other shards' data never depends on these tables.
func (s Shard) WritesMetadata() bool { return s.Index == 0 }
