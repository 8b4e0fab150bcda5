package pipeline

import "time"

// The retry numbers of fleetsync, in one table: every loop that waits and
// tries again takes its RetryPolicy from a function of this file, so a
// policy is changed here and nowhere else. Only the waits are here; what is
// worth retrying is decided where the failure is seen (errors.go, the
// adapters' typed errors). The budgets the configuration sets arrive as
// arguments, wired in cmd/fleetsync/app.go.
//
//	loop                       first wait   growth  cap          jitter  ends after
//	one API call               250ms        ×1.5    30s          ±50%    source.retry_max_elapsed (2m)
//	one ClickHouse statement   100ms        ×1.5    5s           ±50%    clickhouse.retry_max_elapsed (1m)
//	a raw-series re-read       2×RetryWait  ×2      64×RetryWait none    5 attempts (RetryWait 500ms)
//
// The first two jitter because many requests or INSERTs fail together (the
// service or the server went away) and should not come back together; the
// re-reads of a run fail on their own, one response cut at a time.

// Growth and jitter of the loops that talk to a remote service.
const (
	remoteGrowth = 1.5
	remoteJitter = 0.5
)

// APIRetry is the wait between attempts of one call to the source's API
// (extract/fleetapi's Client, which also honours Retry-After): from 250ms,
// growing by half up to 30s, jittered by half, within budget
// (source.retry_max_elapsed).
func APIRetry(budget time.Duration) RetryPolicy {
	return RetryPolicy{Initial: 250 * time.Millisecond, Multiplier: remoteGrowth, Max: 30 * time.Second,
		MaxElapsed: budget, Jitter: remoteJitter}
}

// WriteRetry is the wait between attempts of one ClickHouse statement
// (load/clickhouse's Client.Retry, every INSERT and DDL of the warehouse and
// of the state store): from 100ms, growing by half up to 5s, jittered by
// half, within budget (clickhouse.retry_max_elapsed).
func WriteRetry(budget time.Duration) RetryPolicy {
	return RetryPolicy{Initial: 100 * time.Millisecond, Multiplier: remoteGrowth, Max: 5 * time.Second,
		MaxElapsed: budget, Jitter: remoteJitter}
}

// Re-reads of a raw-series request whose response failed after it started
// (a body cut mid-stream), which the source cannot retry itself: the
// defaults of EngineOptions.RequestAttempts and RetryWait.
const (
	defaultRequestAttempts = 5
	defaultRetryWait       = 500 * time.Millisecond
)

// RereadRetry spaces those re-reads: wait (EngineOptions.RetryWait) doubled
// at each attempt, from 2×wait up to 64×wait, without jitter. The attempts,
// not a time budget, bound them (EngineOptions.RequestAttempts).
func RereadRetry(wait time.Duration) RetryPolicy {
	return RetryPolicy{Initial: 2 * wait, Multiplier: 2, Max: 64 * wait}
}
