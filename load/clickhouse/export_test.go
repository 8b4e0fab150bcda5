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

// RollupCount is how many variables c's hook was handed.
func (c *Client) RollupCount(t testing.TB) float64 {
	return counterValue(t, c.metrics.rollupVariables)
}
