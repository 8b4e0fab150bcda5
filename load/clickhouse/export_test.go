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
