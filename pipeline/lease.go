package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This file is the sync lease, whole: the right a cycle runs under, what a
// backend must implement to grant it (Leaser), the errors a contender and a
// holder that lost it see, and who holds it (LeaseHolder, DeadLeaseHolder).
// The backends (a lock file, a table of the warehouse) live in state/lease.go;
// pipeline/daemon acquires, renews and releases it.

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

// Leaser grants the sync lease: the one method a lease backend implements.
type Leaser interface {
	// Acquire takes the lease for ttl under holder's name, or fails with
	// an error matching ErrLeaseHeld (a *LeaseHeldError) while another
	// holder has it.
	Acquire(ctx context.Context, holder string, ttl time.Duration) (Lease, error)
}

// ErrLeaseHeld is matched (errors.Is) by the error of an Acquire that found
// the lease held by another process, and by every *LeaseHeldError.
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

// LeaseHolder names this process in the sync lease: "host/PID", so that a
// lease left by a killed process on the same host can be recognised
// (DeadLeaseHolder).
func LeaseHolder() string { return fmt.Sprintf("%s/%d", hostname(), os.Getpid()) }

// DeadLeaseHolder reports whether holder (as LeaseHolder writes it) is a
// process of this host that no longer exists: killed before it could release,
// its lease may be taken over at once instead of blocking every sync until it
// expires. A holder of another host, or one not in that form, is never dead.
func DeadLeaseHolder(holder string) bool {
	host, pidText, ok := strings.Cut(holder, "/")
	if !ok || host != hostname() {
		return false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
