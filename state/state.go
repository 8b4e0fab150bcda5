// Package state keeps fleetsync's high-water marks, one per variable, and the
// lease that keeps two sync cycles from running on the same warehouse at once
// (lease.go; the lease itself is pipeline.Lease).
//
// Two backends implement pipeline.StateStore: File, a JSON file for a single
// host, and ClickHouse, the sync_state table beside the data (the default).
// Both never move a mark backwards: a Commit of a smaller mark than the stored
// one leaves the stored one in place.
//
// The lease is protection, not the foundation of correctness: should two
// cycles still overlap, datapoints is a ReplacingMergeTree read with FINAL,
// so points loaded twice count once, and marks only move forward.
package state

import "github.com/fleetsync/fleetsync/pipeline"

// Compile-time checks that both backends are the pipeline's StateStore (and
// its Leaser, lease.go).
var (
	_ pipeline.StateStore = (*File)(nil)
	_ pipeline.StateStore = (*ClickHouse)(nil)
)
