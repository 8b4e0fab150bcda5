package clickhouse

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/fleetsync/fleetsync/pipeline"
)

// pointColumnList is the datapoints INSERT's column list, in the order
// appendChunk fills the batch's columns. loaded_at is left to its DEFAULT.
const pointColumnList = "variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng, version"

// Points writes the datapoints: it is the pipeline's streaming Writer,
// and nothing else (Client.Points).
type Points struct{ *pool }

var _ pipeline.Writer = (*Points)(nil)

// scratch holds the per-chunk columns derived from a pipeline.Batch (ts in
// seconds, nullable lat/lng, the constant version), reused across writes.
type scratch struct {
	tsSec    []int64
	lat, lng []*float64
	version  []uint64
	// keys are the rows' shard_key on a cluster (placement.go).
	keys []uint64
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// appendChunk appends one chunk's rows to b and sends them as a block of
// their own. Flushing per chunk keeps clickhouse-go's column buffers at one
// chunk (they are reset, capacity kept) instead of regrowing them to the
// whole INSERT; the server still squashes the blocks of one INSERT into
// parts of min_insert_block_size_rows. On a cluster (place not nil) each
// row also gets its shard_key.
func appendChunk(b driver.Batch, ch *pipeline.Batch, version uint64, place *placement, sc *scratch) error {
	if ch.Len() == 0 {
		return nil
	}
	sc.fill(ch, version)
	cols := []any{
		ch.VariableID, ch.DeviceID, ch.DeviceLabel, ch.VariableLabel,
		ch.TsMs, sc.tsSec, ch.Value, ch.Context, sc.lat, sc.lng, sc.version,
	}
	if place != nil {
		sc.keys = place.fill(ch, sc.keys)
		cols = append(cols, sc.keys)
	}
	for i, col := range cols {
		if err := b.Column(i).Append(col); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	// Drop the pointers into the caller's chunk: it is reused once we return.
	clear(sc.lat)
	clear(sc.lng)
	return b.Flush()
}

// Begin opens one INSERT into datapoints that takes its rows chunk by chunk
// (see pipeline.Writer). Connecting is retried like a Write; the
// rows of an open INSERT cannot be resent once it fails, so Append and
// Commit do not retry: their errors are *WriteError, and the caller reads
// the rows again when the error is retryable.
func (c *Points) Begin(ctx context.Context) (pipeline.Insert, error) {
	version := c.nextVersion()
	place, err := c.cluster().placementFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin insert into %s: %w", c.table(TableDatapoints), err)
	}
	// The INSERT outlives Begin: its deadline bounds the whole statement.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.InsertTimeout)
	var b driver.Batch
	err = c.retry(ctx, TableDatapoints, func(context.Context) error {
		// The batch keeps the context it is prepared with for its whole
		// life, so it gets ictx rather than the attempt's; connecting is
		// bounded by clickhouse.dial_timeout.
		var err error
		b, err = c.conn.PrepareBatch(ictx, c.insertPointsSQL)
		return err
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("begin insert into %s: %w", c.table(TableDatapoints), err)
	}
	return &insert{c: c, b: b, cancel: cancel, version: version, place: place, sc: scratchPool.Get().(*scratch)}, nil
}

// insert is an open streamed INSERT into datapoints.
type insert struct {
	c       *Points
	b       driver.Batch
	cancel  context.CancelFunc
	version uint64
	place   *placement
	sc      *scratch
	rows    int
	// busy is the time spent sending rows, not waiting for them, so the
	// insert duration metric says how long ClickHouse takes, not the source.
	busy time.Duration
}

// Append implements pipeline.Insert.
func (in *insert) Append(ch *pipeline.Batch) error {
	if err := checkBatch(ch); err != nil {
		return fmt.Errorf("insert into %s: %w", in.c.table(TableDatapoints), err)
	}
	t0 := time.Now()
	err := appendChunk(in.b, ch, in.version, in.place, in.sc)
	in.busy += time.Since(t0)
	if err != nil {
		return in.c.writeError(fmt.Sprintf("send %d rows to %s", ch.Len(), in.c.table(TableDatapoints)), err)
	}
	in.rows += ch.Len()
	return nil
}

// Commit implements pipeline.Insert.
func (in *insert) Commit() error {
	defer in.release()
	t0 := time.Now()
	err := in.b.Send()
	in.c.metrics.duration.WithLabelValues(TableDatapoints).Observe((in.busy + time.Since(t0)).Seconds())
	if err != nil {
		return in.c.writeError(fmt.Sprintf("insert %d rows into %s", in.rows, in.c.table(TableDatapoints)), err)
	}
	in.c.metrics.rows.WithLabelValues(TableDatapoints).Add(float64(in.rows))
	return nil
}

// Abort implements pipeline.Insert.
func (in *insert) Abort() {
	if in.sc != nil {
		in.c.metrics.duration.WithLabelValues(TableDatapoints).Observe(in.busy.Seconds())
	}
	_ = in.b.Abort()
	in.release()
}

func (in *insert) release() {
	if in.sc != nil {
		in.cancel()
		scratchPool.Put(in.sc)
		in.sc = nil
	}
}

// WriteError is a failed INSERT whose rows cannot be resent by the writer
// itself (they were streamed). Retryable says whether reading them again
// and inserting them anew may succeed.
type WriteError struct {
	Op  string
	Err error
	// retryable is decided where the error is seen, by Retryable.
	retryable bool
}

func (e *WriteError) Error() string { return e.Op + ": " + e.Err.Error() }

// Unwrap returns the driver's error.
func (e *WriteError) Unwrap() error { return e.Err }

// Retryable implements pipeline.RetryableError.
func (e *WriteError) Retryable() bool { return e.retryable }

func (c *Points) writeError(op string, err error) error {
	we := &WriteError{Op: op, Err: err, retryable: Retryable(err)}
	if we.retryable {
		c.metrics.retries.WithLabelValues(TableDatapoints).Inc()
	}
	return we
}

// fill derives the computed columns of one chunk.
func (sc *scratch) fill(ch *pipeline.Batch, version uint64) {
	n := ch.Len()
	sc.tsSec = grow(sc.tsSec, n)
	sc.lat = grow(sc.lat, n)
	sc.lng = grow(sc.lng, n)
	sc.version = grow(sc.version, n)
	for i, ms := range ch.TsMs {
		sc.tsSec[i] = floorSeconds(ms)
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

// floorSeconds is ms in whole seconds, rounded down: a negative ms must
// not round up into the next second.
func floorSeconds(ms int64) int64 {
	s := ms / 1000
	if ms%1000 < 0 {
		s--
	}
	return s
}
