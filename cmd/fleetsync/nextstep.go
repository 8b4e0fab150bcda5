package main

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline"
)

// nextStep tells the user what to do about a failure, of one variable or of
// a whole cycle, chosen by the error's type (never its text). Nothing that
// failed moved a mark, so the default is that the next cycle retries.
func nextStep(err error) string {
	var (
		apiErr  *fleetapi.APIError
		trErr   *fleetapi.TransportError
		decErr  *fleetapi.DecodeError
		chErr   *clickhouse.Exception
		netErr  net.Error
		fromAPI = errors.As(err, &apiErr) || errors.As(err, &trErr) || errors.As(err, &decErr)
	)
	switch {
	case errors.Is(err, context.Canceled):
		return "the cycle was stopped (a signal, or the lease passed to another process); the next cycle resumes where this one stopped"
	case fleetapi.IsUnauthorized(err):
		return "the service rejected the API token again after re-reading it: put a valid token in source.token_file (or source.token), then rerun"
	case trErr != nil && trErr.Untrusted():
		return "the service's TLS certificate is not trusted: set source.ca_file to the CA that signed it (a private CA, or a proxy that inspects TLS), or fix source.base_url's host name"
	case fleetapi.IsNotFound(err):
		return "the service does not know the object (deleted since the walk, or a wrong id or ~label in the sync scope); the next cycle's metadata refresh drops a deleted one"
	case fleetapi.IsAPILimitExceeded(err):
		return "the service answered 420 API limit exceeded for longer than source.retry_max_elapsed: the token's request budget is used up; nothing is lost, the next cycle after the budget comes back resumes where this one stopped (check the account's plan and usage)"
	case fromAPI && pipeline.IsRetryable(err):
		return "the service kept failing for longer than source.retry_max_elapsed; the next cycle retries (raise source.retry_max_elapsed; on 429s the request rate adapts, and source.requests_per_second caps it)"
	case fromAPI:
		return "the service's answer could not be used; the next cycle retries, and if it fails the same way, report this error"
	case errors.As(err, &chErr) || errors.As(err, &netErr):
		return "ClickHouse kept failing for longer than clickhouse.retry_max_elapsed: check that it is up and reachable at clickhouse.addr; the next cycle retries"
	default:
		return "the next cycle retries; if it fails the same way, report this error"
	}
}

// msRange renders a window of POSIX milliseconds as RFC 3339 instants.
func msRange(from, to int64) string {
	return time.UnixMilli(from).UTC().Format(time.RFC3339) + ".." + time.UnixMilli(to).UTC().Format(time.RFC3339)
}
