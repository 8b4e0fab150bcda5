package clickhouse

import (
	"context"
	"fmt"

	"github.com/fleetsync/fleetsync/pipeline"
)

// This file gives the package's tests (internal, external and the cluster
// tests) an INSERT of whole chunks at once: the product inserts through
// the engine's Insert (Begin, Append, Commit), so the helper lives beside
// the tests that use it, not in the product.

// Write inserts the rows of all chunks as one INSERT into datapoints, through
// clickhouse-go's columnar API, and returns once ClickHouse has acknowledged
// them. Retryable failures are retried within Config.MaxElapsed, rebuilding
// the INSERT from the chunks each time (a failed clickhouse-go batch cannot
// be resent). All rows of one Write share one version, later than any
// earlier Write of this process, so re-read points replace older copies.
func (c *Client) Write(ctx context.Context, chunks []*pipeline.Batch) error {
	rows := 0
	for _, ch := range chunks {
		if err := checkBatch(ch); err != nil {
			return fmt.Errorf("insert into %s: %w", c.Table(TableDatapoints), err)
		}
		rows += ch.Len()
	}
	if rows == 0 {
		return nil
	}
	version := c.NextVersion()
	place, err := c.cluster().placementFor(ctx)
	if err != nil {
		return fmt.Errorf("insert into %s: %w", c.Table(TableDatapoints), err)
	}
	sc := scratchPool.Get().(*scratch)
	defer func() {
		// Drop the pointers into the caller's chunks before pooling.
		clear(sc.lat)
		clear(sc.lng)
		scratchPool.Put(sc)
	}()
	err = c.Retry(ctx, TableDatapoints, func(ctx context.Context) error {
		return c.insertPoints(ctx, chunks, version, place, sc)
	})
	if err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", rows, c.Table(TableDatapoints), err)
	}
	c.metrics.rows.WithLabelValues(TableDatapoints).Add(float64(rows))
	return nil
}

func (c *Client) insertPoints(ctx context.Context, chunks []*pipeline.Batch, version uint64, place *placement, sc *scratch) error {
	b, err := c.conn.PrepareBatch(ctx, c.insertPointsSQL)
	if err != nil {
		return err
	}
	// Abort releases the connection when we return before Send; after Send
	// it is a no-op.
	defer b.Abort()
	for _, ch := range chunks {
		if err := appendChunk(b, ch, version, place, sc); err != nil {
			return err
		}
	}
	return b.Send()
}
