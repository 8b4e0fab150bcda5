package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// retryableCodes are the ClickHouse server exceptions that say "try again
// later" rather than "this statement is wrong". Codes are stable across
// releases; names as in ErrorCodes.cpp.
var retryableCodes = map[int32]bool{
	// A Distributed read whose remote replica died mid-query ("Attempt to
	// read after eof: while receiving packet from <replica>"): the next
	// attempt reads a replica that is up (seen on the test cluster).
	32:  true, // ATTEMPT_TO_READ_AFTER_EOF
	159: true, // TIMEOUT_EXCEEDED
	160: true, // TOO_SLOW
	202: true, // TOO_MANY_SIMULTANEOUS_QUERIES
	203: true, // NO_FREE_CONNECTION
	209: true, // SOCKET_TIMEOUT
	210: true, // NETWORK_ERROR
	236: true, // ABORTED
	241: true, // MEMORY_LIMIT_EXCEEDED
	242: true, // TABLE_IS_READ_ONLY (replica lost its keeper session)
	252: true, // TOO_MANY_PARTS
	319: true, // UNKNOWN_STATUS_OF_INSERT
	// No replica of a shard is fresh enough for a read that may not fall
	// back to a stale one (readReplicated's reads): it catches up.
	369: true, // ALL_REPLICAS_ARE_STALE
	394: true, // QUERY_WAS_CANCELLED (server shutting down)
	425: true, // SYSTEM_ERROR
	999: true, // KEEPER_EXCEPTION
}

// Retryable reports whether err is a failure that may go away by itself:
// a network failure (refused, reset, EOF, timeout), an exhausted connection
// pool, or a transient server exception (too many parts, memory limit,
// timeouts...). Anything else — a syntax error, an unknown table or column, a
// value the column cannot hold, a wrong password — is permanent. The
// decision is made on error types and exception codes, never on text.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var exc *clickhouse.Exception
	if errors.As(err, &exc) {
		return retryableCodes[exc.Code]
	}
	if tlsFailure(err, nil, true, false) != nil {
		return false // an untrusted certificate stays untrusted
	}
	switch {
	case errors.Is(err, clickhouse.ErrAcquireConnTimeout),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, net.ErrClosed):
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		// A name that does not exist will not start to exist; a resolver
		// timeout may pass.
		return !dnsErr.IsNotFound
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	// An attempt that ran out of its own InsertTimeout; Retry has already
	// checked that the caller's context is still alive.
	return errors.Is(err, context.DeadlineExceeded)
}

// retry runs op until it succeeds, fails permanently (see Retryable), the
// retry budget (Config.MaxElapsed) is spent, or ctx ends. Each attempt gets
// its own context bounded by Config.InsertTimeout. table labels the metrics
// and log lines. The returned error wraps the last attempt's error (and
// ctx's error when ctx ended), so errors.As/Is see both.
//
// Retrying an INSERT whose acknowledgement was lost may store its rows twice;
// every fleetsync table is a ReplacingMergeTree read with FINAL or argMax,
// so a duplicate is harmless.
func (c *pool) retry(ctx context.Context, table string, op func(ctx context.Context) error) error {
	policy := pipeline.WriteRetry(c.cfg.MaxElapsed).NewBackOff()
	started := time.Now()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, c.cfg.InsertTimeout)
		t0 := time.Now()
		err := op(actx)
		cancel()
		c.metrics.duration.WithLabelValues(table).Observe(time.Since(t0).Seconds())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (after %d attempts; last: %w)", ctx.Err(), attempt, err)
		}
		if !Retryable(err) {
			return err
		}
		wait := policy.NextBackOff()
		if wait == backoff.Stop {
			return fmt.Errorf("gave up after %d attempts in %s: %w", attempt, time.Since(started).Round(time.Millisecond), err)
		}
		c.metrics.retries.WithLabelValues(table).Inc()
		c.log.Warn("clickhouse write failed; retrying",
			zap.String("table", table), zap.Int("attempt", attempt),
			zap.Duration("backoff", wait), zap.Error(err))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (after %d attempts; last: %w)", ctx.Err(), attempt, err)
		case <-timer.C:
		}
	}
}
