package clickhouse

import (
	"testing"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

// OpenTestClient is newTestClient on the shared test server, for the
// external tests (package clickhouse_test), which cannot call it directly:
// a migrated client on a fresh database, closed when the test ends.
func OpenTestClient(t testing.TB) *Client {
	return newTestClient(t, chtest.Shared(t), nil)
}

// OpenTestClientOn is OpenTestClient on database db of the shared test
// server (a second writer of the same tables), or on a fresh one when db
// is empty.
func OpenTestClientOn(t testing.TB, db string) *Client {
	srv := chtest.Shared(t)
	if db == "" {
		return newTestClient(t, srv, nil)
	}
	return newTestClient(t, srv, func(c *Config) { c.Database = db })
}

// RollupCounts is how many variables c's hook was handed, and how many of
// them it wrote from a proven record instead of recomputing (held.go).
func (c *Client) RollupCounts(t testing.TB) (handed, proven float64) {
	return counterValue(t, c.metrics.rollupVariables), counterValue(t, c.metrics.rollupProven)
}

// ProveSmallRecords lets c prove records of any size (minProvenRows is
// for a real fleet's costs), so that tests of a few points take both ways.
func (c *Client) ProveSmallRecords() { c.held.minRows = 1 }
