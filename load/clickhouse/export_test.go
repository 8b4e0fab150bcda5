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

// OpenHoldingTestClient is OpenTestClient with Config.HoldRollups, on db
// when it is not empty (a second writer of the same tables).
func OpenHoldingTestClient(t testing.TB, db string, hold bool) *Client {
	srv := chtest.Shared(t)
	if db == "" {
		return newTestClient(t, srv, func(c *Config) { c.HoldRollups = hold })
	}
	return newTestClient(t, srv, func(c *Config) { c.Database, c.HoldRollups = db, hold })
}

// HeldStats is how many variables c wrote from held rows, and how many
// hours and states it holds now.
func HeldStats(c *Client) (written, hours, states int) {
	if c.held == nil {
		return 0, 0, 0
	}
	c.held.mu.Lock()
	defer c.held.mu.Unlock()
	return c.held.written, c.held.hours, len(c.held.vars)
}
