package state

import (
	"fmt"
	"strings"
)

// LeaseName is the lease of shard index of count: two instances of one
// index exclude each other, instances of different indexes never do. An
// unsharded deployment (count 1) keeps the one lease it always had.
//
// The name holds the index only, not the count: while shard_count changes
// (old and new instances overlapping) shard 0 of 2 and shard 0 of 3 still
// exclude each other, and instances whose variables overlap without
// excluding each other are safe anyway: datapoints FINAL counts a point
// loaded twice once, and marks only move forward.
func LeaseName(index, count int) string {
	if count <= 1 {
		return leaseName
	}
	return fmt.Sprintf("%s/shard-%d", leaseName, index)
}

// SetLease makes Acquire take the named lease (see LeaseName): its own lock
// file beside the state file, so that shards sharing a state file do not
// wait for each other. Their commits still merge under the file's lock.
func (f *File) SetLease(name string) { f.lease = name }

// leasePath is the lock file of the file store's lease.
func (f *File) leasePath() string {
	if f.lease == "" || f.lease == leaseName {
		return f.path + ".lease"
	}
	return f.path + "." + strings.ReplaceAll(strings.TrimPrefix(f.lease, leaseName+"/"), "/", "-") + ".lease"
}
