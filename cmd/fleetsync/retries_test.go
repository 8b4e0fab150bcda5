package main

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/fleetsync/fleetsync/config"
	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline"
)

// The API client keeps a fallback policy for use on its own (it may import
// no fleetsync package); fleetsync hands in its retry table's row instead.
// The two must not drift apart, or tests and fleetbench, which run the
// client on its fallback, would wait differently from the product.
func TestTheAPIClientsFallbackIsTheRetryTablesRow(t *testing.T) {
	budget := time.Duration(config.Default().Source.RetryMaxElapsed)
	row := pipeline.APIRetry(budget)
	if row.Initial != fleetapi.DefaultBackoffInitial || row.Max != fleetapi.DefaultBackoffMax || row.MaxElapsed != fleetapi.DefaultMaxElapsed {
		t.Errorf("pipeline.APIRetry(source.retry_max_elapsed default) = %+v; fleetapi falls back to initial %s, max %s, budget %s",
			row, fleetapi.DefaultBackoffInitial, fleetapi.DefaultBackoffMax, fleetapi.DefaultMaxElapsed)
	}
	// The fallback grows and jitters by backoff/v4's defaults.
	if row.Multiplier != backoff.DefaultMultiplier || row.Jitter != backoff.DefaultRandomizationFactor {
		t.Errorf("pipeline.APIRetry grows by %v and jitters by %v; fleetapi's fallback by %v and %v",
			row.Multiplier, row.Jitter, backoff.DefaultMultiplier, backoff.DefaultRandomizationFactor)
	}
}
