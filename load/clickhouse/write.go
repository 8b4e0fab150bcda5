package clickhouse

import (
	"context"
	"fmt"
	"sync"

	"github.com/fleetsync/fleetsync/pipeline"
)

// pointColumnList is the datapoints INSERT's column list, in the order
// appendChunk fills the batch's columns. loaded_at is left to its DEFAULT.
const pointColumnList = "variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng, version"

// Compile-time check that the Client is the pipeline's Writer.
var _ pipeline.Writer = (*Client)(nil)

// scratch holds the per-chunk columns derived from a pipeline.Batch (ts in
// seconds, nullable lat/lng, the constant version), reused across writes.
type scratch struct {
	tsSec    []int64
	lat, lng []*float64
	version  []uint64
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

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
	sc := scratchPool.Get().(*scratch)
	defer func() {
		// Drop the pointers into the caller's chunks before pooling.
		clear(sc.lat)
		clear(sc.lng)
		scratchPool.Put(sc)
	}()
	err := c.Retry(ctx, TableDatapoints, func(ctx context.Context) error {
		return c.insertPoints(ctx, chunks, version, sc)
	})
	if err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", rows, c.Table(TableDatapoints), err)
	}
	c.metrics.rows.WithLabelValues(TableDatapoints).Add(float64(rows))
	return nil
}

func (c *Client) insertPoints(ctx context.Context, chunks []*pipeline.Batch, version uint64, sc *scratch) error {
	b, err := c.conn.PrepareBatch(ctx, c.insertPointsSQL)
	if err != nil {
		return err
	}
	// Abort releases the connection when we return before Send; after Send
	// it is a no-op.
	defer b.Abort()
	for _, ch := range chunks {
		n := ch.Len()
		if n == 0 {
			continue
		}
		sc.fill(ch, version)
		cols := [...]any{
			ch.VariableID, ch.DeviceID, ch.DeviceLabel, ch.VariableLabel,
			ch.TsMs, sc.tsSec, ch.Value, ch.Context, sc.lat, sc.lng, sc.version,
		}
		for i, col := range cols {
			if err := b.Column(i).Append(col); err != nil {
				return fmt.Errorf("column %d: %w", i, err)
			}
		}
	}
	return b.Send()
}

// fill derives the computed columns of one chunk.
func (sc *scratch) fill(ch *pipeline.Batch, version uint64) {
	n := ch.Len()
	sc.tsSec = grow(sc.tsSec, n)
	sc.lat = grow(sc.lat, n)
	sc.lng = grow(sc.lng, n)
	sc.version = grow(sc.version, n)
	for i, ms := range ch.TsMs {
		// Floor division: a negative ms must not round up into the next second.
		s := ms / 1000
		if ms%1000 < 0 {
			s--
		}
		sc.tsSec[i] = s
	}
	// Pointers into the chunk's own slices: clickhouse-go copies the values
	// during Append, and nil is NULL.
	for i := range n {
		sc.lat[i], sc.lng[i] = nil, nil
		if ch.HasLat[i] {
			sc.lat[i] = &ch.Lat[i]
		}
		if ch.HasLng[i] {
			sc.lng[i] = &ch.Lng[i]
		}
		sc.version[i] = version
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// checkBatch rejects a chunk whose columns disagree in length, which would
// otherwise surface as an obscure driver error or misaligned rows.
func checkBatch(b *pipeline.Batch) error {
	n := b.Len()
	lens := [...]int{len(b.VariableID), len(b.DeviceID), len(b.DeviceLabel), len(b.VariableLabel),
		len(b.Value), len(b.Context), len(b.Lat), len(b.Lng), len(b.HasLat), len(b.HasLng)}
	for _, l := range lens {
		if l != n {
			return fmt.Errorf("malformed batch: columns of %v rows, want %d each", lens, n)
		}
	}
	return nil
}
