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
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Compile-time checks that both backends are the pipeline's StateStore.
var (
	_ pipeline.StateStore = (*File)(nil)
	_ pipeline.StateStore = (*ClickHouse)(nil)
)

// Lease is the right to run a sync cycle on one warehouse, held until
// Release or until it expires without Renew.
type Lease interface {
	// Holder is the name the lease was acquired under.
	Holder() string
	// Expires is when the lease lapses unless renewed.
	Expires() time.Time
	// Renew extends the lease by its ttl from now. It returns an error
	// wrapping ErrLeaseLost when another holder has taken it over (after it
	// expired), in which case the caller should stop its cycle.
	Renew(ctx context.Context) error
	// Release gives the lease up so the next cycle can start at once.
	Release(ctx context.Context) error
}

// ErrLeaseHeld is matched (errors.Is) by every *LeaseHeldError.
var ErrLeaseHeld = errors.New("sync lease held by another process")

// ErrLeaseLost is returned by Renew when the lease has passed to another
// holder.
var ErrLeaseLost = errors.New("sync lease lost to another holder")

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

// mergeMark applies the never-backwards rule: the given mark replaces the
// stored one unless the stored one is further ahead. At equal marks the
// later read (its CheckedMs) wins, whichever committed last, as in the
// ClickHouse store; a mark is kept whole, never mixed from two reads.
func mergeMark(stored pipeline.Mark, ok bool, m pipeline.Mark) pipeline.Mark {
	if ok && (stored.HwmMs > m.HwmMs || (stored.HwmMs == m.HwmMs && stored.CheckedMs > m.CheckedMs)) {
		return stored
	}
	return m
}
