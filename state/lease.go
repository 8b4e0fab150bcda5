package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	chload "github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline"
)

// The two backends of pipeline.Leaser: File's lock file beside the state
// file, and ClickHouse's rows of sync_lease. What a lease is, its errors and
// who holds it are pipeline/lease.go's; only how each store keeps it is here.

// Compile-time checks that both stores grant the sync lease.
var (
	_ pipeline.Leaser = (*File)(nil)
	_ pipeline.Leaser = (*ClickHouse)(nil)
)

// leaseName is the lease of an unsharded deployment, which keeps the lock
// file and the sync_lease row it always had.
var leaseName = pipeline.Shard{}.LeaseName()

// SetLease makes Acquire take the named lease (pipeline.Shard.LeaseName): its own lock
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

// SetLease makes Acquire contend for the named lease (pipeline.Shard.LeaseName), so
// that shards do not wait for each other.
func (s *ClickHouse) SetLease(name string) { s.lease = name }

// leaseInfo is what a lease file holds, for the message a contender prints.
type leaseInfo struct {
	Holder  string    `json:"holder"`
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// Acquire takes the sync lease of this state file: an exclusive flock on
// PATH.lease, which the kernel drops when the process dies, so a crashed
// holder never blocks the next cycle. ttl is recorded for the contenders'
// message and Renew; the flock itself does not expire. A held lease yields a
// *pipeline.LeaseHeldError.
func (f *File) Acquire(ctx context.Context, holder string, ttl time.Duration) (pipeline.Lease, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("acquire lease: ttl %s must be positive", ttl)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path := f.leasePath()
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("acquire lease %s: %w", path, err)
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer fh.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			held := &pipeline.LeaseHeldError{Where: path}
			var info leaseInfo
			if data, rerr := os.ReadFile(path); rerr == nil && json.Unmarshal(data, &info) == nil {
				held.Holder, held.Expires = info.Holder, info.Expires
			}
			return nil, held
		}
		return nil, fmt.Errorf("acquire lease %s: %w", path, err)
	}
	l := &fileLease{fh: fh, path: path, ttl: ttl, info: leaseInfo{Holder: holder, Token: newToken()}}
	if err := l.write(); err != nil {
		fh.Close()
		return nil, fmt.Errorf("acquire lease %s: %w", path, err)
	}
	return l, nil
}

type fileLease struct {
	mu   sync.Mutex
	fh   *os.File
	path string
	ttl  time.Duration
	info leaseInfo
}

// write records holder and expiry in the locked file. It is rewritten in
// place (not renamed) because the flock belongs to this inode.
func (l *fileLease) write() error {
	l.info.Expires = time.Now().Add(l.ttl).UTC()
	data, err := json.Marshal(l.info)
	if err != nil {
		return err
	}
	if err := l.fh.Truncate(0); err != nil {
		return err
	}
	_, err = l.fh.WriteAt(data, 0)
	return err
}

func (l *fileLease) Holder() string { return l.info.Holder }

func (l *fileLease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info.Expires
}

// Renew pushes the recorded expiry forward; the flock itself cannot be lost
// while the process lives.
func (l *fileLease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fh == nil {
		return fmt.Errorf("renew lease %s: %w (already released)", l.path, pipeline.ErrLeaseLost)
	}
	if err := l.write(); err != nil {
		return fmt.Errorf("renew lease %s: %w", l.path, err)
	}
	return nil
}

// Release clears the lease file and drops the flock. Releasing twice is a
// no-op.
func (l *fileLease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fh == nil {
		return nil
	}
	_ = l.fh.Truncate(0)
	err := l.fh.Close()
	l.fh = nil
	if err != nil {
		return fmt.Errorf("release lease %s: %w", l.path, err)
	}
	return nil
}

// newToken is a random id telling apart two holders that share a name.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
// if a live lease of someone else is there, fail with *pipeline.LeaseHeldError,
// unless its holder is a process of this host that no longer exists
// (pipeline.DeadLeaseHolder: killed before it could release, it would block
// every sync until the lease expired); otherwise insert our claim with a fresh version and read the row with the
// greatest version back; the lease is ours only if that row is our claim.
//
// The race window: two contenders that both read "free" before either claim
// lands, where one reads its claim back before the other's claim is inserted,
// both believe they hold the lease. It is a few round trips wide; the loser
// finds out at its next Renew (pipeline.ErrLeaseLost). Even then the data stay right:
// datapoints FINAL counts a point loaded twice once, and marks only move
// forward (see ClickHouse).
//
// Expiry compares the writers' wall clocks; hosts are assumed to agree to
// well within ttl.
func (s *ClickHouse) Acquire(ctx context.Context, holder string, ttl time.Duration) (pipeline.Lease, error) {
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
		if cur.live(time.Now()) && !pipeline.DeadLeaseHolder(cur.holder) {
			return nil, &pipeline.LeaseHeldError{Holder: cur.holder, Expires: cur.expires, Where: where}
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
			return nil, &pipeline.LeaseHeldError{Holder: back.holder, Expires: back.expires, Where: where}
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
		return fmt.Errorf("renew lease in %s: %w (already released)", where, pipeline.ErrLeaseLost)
	}
	cur, err := l.s.readLease(ctx)
	if err != nil {
		return fmt.Errorf("renew lease in %s: %w", where, err)
	}
	if cur.token != l.token {
		return fmt.Errorf("renew lease in %s: %w: now held by %q", where, pipeline.ErrLeaseLost, cur.holder)
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
