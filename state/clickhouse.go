package state

import (
	"context"
	"fmt"
	"sync"
	"time"

	chload "github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline"
)

// leaseName is the lease of an unsharded deployment: one sync cycle at a
// time may write a warehouse (see LeaseName for shards).
const leaseName = "sync"

// ClickHouse keeps the marks in the sync_state table of the warehouse that
// holds the data, so marks and points live and die together. The tables come
// from (*chload.Client).Migrate.
//
// A row's version is its mark (hwm_ms), so when ClickHouse merges the rows of
// a variable it keeps the greatest mark; readers take max(hwm_ms) so an
// unmerged smaller mark, from a slow concurrent writer say, is never seen
// either. Commit therefore only inserts: no read-modify-write, and no race.
type ClickHouse struct {
	c     *chload.Client
	stale func(holder string) bool
	// lease is the row of sync_lease that Acquire contends for.
	lease string
}

// NewClickHouse returns a store on c's database.
func NewClickHouse(c *chload.Client) *ClickHouse { return &ClickHouse{c: c, lease: leaseName} }

// SetLease makes Acquire contend for the named lease (see LeaseName), so
// that shards do not wait for each other.
func (s *ClickHouse) SetLease(name string) { s.lease = name }

// SetStaleHolder installs a check for leases whose holder is known to be
// gone (a process on this host that no longer exists, killed before it could
// release). Such a lease is taken over at once instead of blocking every
// sync until it expires.
func (s *ClickHouse) SetStaleHolder(fn func(holder string) bool) { s.stale = fn }

// Load returns each variable's greatest mark. LastActivityMs, CheckedMs and
// FutureMs come from one row, the one holding that mark (on a tie, the one
// of the latest read), so that they describe one read and never mix two.
func (s *ClickHouse) Load(ctx context.Context) (map[string]pipeline.Mark, error) {
	table := s.c.Table(chload.TableSyncState)
	const key = "(version, checked_ms, updated_at, last_activity_ms, future_ms)"
	rows, err := s.c.Conn().Query(ctx,
		"SELECT variable_id, max(hwm_ms), argMax(last_activity_ms, "+key+"), argMax(checked_ms, "+key+"), argMax(future_ms, "+key+"), max(updated_at) FROM "+
			table+" GROUP BY variable_id")
	if err != nil {
		return nil, fmt.Errorf("load marks from %s (run `fleetsync migrate` if the table is missing): %w", table, err)
	}
	defer rows.Close()
	marks := map[string]pipeline.Mark{}
	for rows.Next() {
		var m pipeline.Mark
		if err := rows.Scan(&m.VariableID, &m.HwmMs, &m.LastActivityMs, &m.CheckedMs, &m.FutureMs, &m.UpdatedAt); err != nil {
			return nil, fmt.Errorf("load marks from %s: %w", table, err)
		}
		marks[m.VariableID] = m
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load marks from %s: %w", table, err)
	}
	return marks, nil
}

// Commit inserts the marks, retrying retryable failures. A mark smaller than
// the stored one is stored too but never wins (see ClickHouse).
func (s *ClickHouse) Commit(ctx context.Context, marks []pipeline.Mark) error {
	if len(marks) == 0 {
		return nil
	}
	table := s.c.Table(chload.TableSyncState)
	now := time.Now().UTC()
	err := s.c.Retry(ctx, chload.TableSyncState, func(ctx context.Context) error {
		b, err := s.c.Conn().PrepareBatch(ctx, "INSERT INTO "+table+" (variable_id, hwm_ms, last_activity_ms, updated_at, version, checked_ms, future_ms)")
		if err != nil {
			return err
		}
		defer b.Abort()
		for _, m := range marks {
			at := m.UpdatedAt
			if at.IsZero() {
				at = now
			}
			if err := b.Append(m.VariableID, m.HwmMs, m.LastActivityMs, at.UTC(), markVersion(m.HwmMs), m.CheckedMs, m.FutureMs); err != nil {
				return fmt.Errorf("mark of %s: %w", m.VariableID, err)
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("commit %d marks to %s: %w", len(marks), table, err)
	}
	return nil
}

// markVersion orders marks for ReplacingMergeTree: the greater mark, the
// greater version. Marks before 1970 do not occur; they sort first.
func markVersion(hwmMs int64) uint64 {
	if hwmMs < 0 {
		return 0
	}
	return uint64(hwmMs)
}

// leaseRow is the current (greatest-version) row of sync_lease.
type leaseRow struct {
	holder, token string
	expires       time.Time
	found         bool
}

func (r leaseRow) live(now time.Time) bool {
	return r.found && r.token != "" && r.expires.After(now)
}

func (s *ClickHouse) readLease(ctx context.Context) (leaseRow, error) {
	var r leaseRow
	var n uint64
	var expMs int64
	err := s.c.Conn().QueryRow(ctx,
		"SELECT count(), argMax(holder, version), argMax(token, version), argMax(expires_at_ms, version) FROM "+
			s.c.Table(chload.TableSyncLease)+" WHERE name = ?", s.lease).Scan(&n, &r.holder, &r.token, &expMs)
	if err != nil {
		return r, err
	}
	r.found = n > 0
	r.expires = time.UnixMilli(expMs)
	return r, nil
}

func (s *ClickHouse) writeLease(ctx context.Context, holder, token string, expires time.Time) error {
	return s.c.Retry(ctx, chload.TableSyncLease, func(ctx context.Context) error {
		b, err := s.c.Conn().PrepareBatch(ctx, "INSERT INTO "+s.c.Table(chload.TableSyncLease)+" (name, holder, token, expires_at_ms, version)")
		if err != nil {
			return err
		}
		defer b.Abort()
		if err := b.Append(s.lease, holder, token, expires.UnixMilli(), s.c.NextVersion()); err != nil {
			return err
		}
		return b.Send()
	})
}

// Acquire takes the warehouse's sync lease for ttl. ClickHouse has no
// transactions, so it claims by insert-then-read-back: read the current row;
// if a live lease of someone else is there, fail with *LeaseHeldError;
// otherwise insert our claim with a fresh version and read the row with the
// greatest version back; the lease is ours only if that row is our claim.
//
// The race window: two contenders that both read "free" before either claim
// lands, where one reads its claim back before the other's claim is inserted,
// both believe they hold the lease. It is a few round trips wide; the loser
// finds out at its next Renew (ErrLeaseLost). Even then the data stay right:
// datapoints FINAL counts a point loaded twice once, and marks only move
// forward (see ClickHouse).
//
// Expiry compares the writers' wall clocks; hosts are assumed to agree to
// well within ttl.
func (s *ClickHouse) Acquire(ctx context.Context, holder string, ttl time.Duration) (Lease, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("acquire lease: ttl %s must be positive", ttl)
	}
	where := s.c.Table(chload.TableSyncLease)
	if s.lease != leaseName {
		where += " (" + s.lease + ")"
	}
	token := newToken()
	// A claim can lose to a concurrent Release (a newer, empty row); then the
	// lease is free and a second try is fair. Losing to a live claim is final.
	for try := 0; try < 3; try++ {
		cur, err := s.readLease(ctx)
		if err != nil {
			return nil, fmt.Errorf("acquire lease in %s (run `fleetsync migrate` if the table is missing): %w", where, err)
		}
		if cur.live(time.Now()) && (s.stale == nil || !s.stale(cur.holder)) {
			return nil, &LeaseHeldError{Holder: cur.holder, Expires: cur.expires, Where: where}
		}
		expires := time.Now().Add(ttl)
		if err := s.writeLease(ctx, holder, token, expires); err != nil {
			return nil, fmt.Errorf("acquire lease in %s: %w", where, err)
		}
		back, err := s.readBack(ctx, token, cur.token)
		if err != nil {
			return nil, fmt.Errorf("acquire lease in %s: %w", where, err)
		}
		if back.token == token {
			return &chLease{s: s, holder: holder, token: token, ttl: ttl, expires: expires}, nil
		}
		if back.live(time.Now()) {
			return nil, &LeaseHeldError{Holder: back.holder, Expires: back.expires, Where: where}
		}
	}
	return nil, fmt.Errorf("acquire lease in %s: lost three claims to concurrent releases; try again", where)
}

// readBackFor bounds how long Acquire waits to see its own claim: on a
// cluster the read may reach a replica that has not yet replicated it.
const readBackFor = 3 * time.Second

// readBack reads the lease until it shows the claim token, or any row
// newer than the one read before claiming (token before), or readBackFor
// passes. Only replication lag makes it wait: on one server the first read
// shows the claim or what beat it.
func (s *ClickHouse) readBack(ctx context.Context, token, before string) (leaseRow, error) {
	deadline := time.Now().Add(readBackFor)
	for {
		back, err := s.readLease(ctx)
		if err != nil || back.token == token || back.token != before || time.Now().After(deadline) {
			return back, err
		}
		select {
		case <-ctx.Done():
			return back, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type chLease struct {
	s       *ClickHouse
	holder  string
	token   string
	ttl     time.Duration
	mu      sync.Mutex
	expires time.Time
	done    bool
}

func (l *chLease) Holder() string { return l.holder }

func (l *chLease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Renew checks the lease is still ours and extends it by its ttl.
func (l *chLease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	where := l.s.c.Table(chload.TableSyncLease)
	if l.done {
		return fmt.Errorf("renew lease in %s: %w (already released)", where, ErrLeaseLost)
	}
	cur, err := l.s.readLease(ctx)
	if err != nil {
		return fmt.Errorf("renew lease in %s: %w", where, err)
	}
	if cur.token != l.token {
		return fmt.Errorf("renew lease in %s: %w: now held by %q", where, ErrLeaseLost, cur.holder)
	}
	expires := time.Now().Add(l.ttl)
	if err := l.s.writeLease(ctx, l.holder, l.token, expires); err != nil {
		return fmt.Errorf("renew lease in %s: %w", where, err)
	}
	l.expires = expires
	return nil
}

// Release ends the lease by inserting a newer, empty row, unless the lease
// has already passed to someone else (then there is nothing of ours to end).
func (l *chLease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return nil
	}
	where := l.s.c.Table(chload.TableSyncLease)
	cur, err := l.s.readLease(ctx)
	if err != nil {
		return fmt.Errorf("release lease in %s: %w", where, err)
	}
	l.done = true
	if cur.token != l.token {
		return nil
	}
	if err := l.s.writeLease(ctx, l.holder, "", time.UnixMilli(0)); err != nil {
		return fmt.Errorf("release lease in %s: %w", where, err)
	}
	return nil
}
