// Package state keeps fleetsync's high-water marks, one per variable, and the
// lease that keeps two sync cycles from running on the same warehouse at once.
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

import (
	"fmt"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Compile-time checks that both backends are the pipeline's StateStore.
var (
	_ pipeline.StateStore = (*File)(nil)
	_ pipeline.StateStore = (*ClickHouse)(nil)
	_ pipeline.Leaser     = (*File)(nil)
	_ pipeline.Leaser     = (*ClickHouse)(nil)
)

// Lease is the sync lease the stores grant (see pipeline.Lease).
type Lease = pipeline.Lease

// ErrLeaseHeld is matched (errors.Is) by every *LeaseHeldError.
var ErrLeaseHeld = pipeline.ErrLeaseHeld

// ErrLeaseLost is returned by Renew when the lease has passed to another
// holder.
var ErrLeaseLost = pipeline.ErrLeaseLost

// LeaseHeldError says who holds the lease Acquire wanted, and until when.
type LeaseHeldError struct {
	Holder  string
	Expires time.Time
	// Where names the lease (a file path or a ClickHouse table).
	Where string
}

func (e *LeaseHeldError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "an unnamed process"
	}
	exp := "unknown"
	if !e.Expires.IsZero() {
		exp = e.Expires.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("another sync is running: %s holds the lease %s until %s; wait for it to finish (a crashed holder's lease lapses at that time)",
		holder, e.Where, exp)
}

// Is makes errors.Is(err, ErrLeaseHeld) true.
func (e *LeaseHeldError) Is(target error) bool { return target == ErrLeaseHeld }
