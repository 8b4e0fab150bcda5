package pipeline

import (
	"context"
	"errors"
	"time"
)

// Lease is the right to run a sync cycle on one warehouse, held until
// Release or until it expires without Renew. The state stores grant it.
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

// Leaser grants the sync lease.
type Leaser interface {
	// Acquire takes the lease for ttl under holder's name, or fails with
	// an error matching ErrLeaseHeld while another holder has it.
	Acquire(ctx context.Context, holder string, ttl time.Duration) (Lease, error)
}

// ErrLeaseHeld is matched (errors.Is) by the error of an Acquire that found
// the lease held by another process.
var ErrLeaseHeld = errors.New("sync lease held by another process")

// ErrLeaseLost is returned by Renew when the lease has passed to another
// holder.
var ErrLeaseLost = errors.New("sync lease lost to another holder")
