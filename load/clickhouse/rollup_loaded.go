package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Rows written from what a pass loaded. A recompute reads every point of
// the hours it replaces under FINAL; in a backfill that is every point just
// loaded, and costs ClickHouse nearly as much as the INSERTs did. When the
// pipeline hands a variable's Aggregates, one key-only query per batch
// (variable_id, ts_ms and ts, no FINAL, no value or context column) counts
// the table's rows in the aggregated hours and reads its newest timestamp.
// If the count is the number of rows aggregated, the table holds those
// rows and no other there (they were acknowledged, so the table has at
// least them); the pipeline proved them distinct, so FINAL keeps each of
// them and the aggregates equal what the recompute would compute. If the
// newest timestamp is the newest row aggregated, that row is the latest.
// Anything else (a re-read of the lookback, an older point in the first
// hour, a duplicate left by a failed INSERT, another writer) fails the
// check and the variable is recomputed as before.
//
// The version is taken before the check, as a recompute takes it before
// its statement reads: the argument of rollup.go holds unchanged, since the
// rows written are what a recompute would have computed from the check's
// snapshot.

// proveLoaded returns the variables of loaded whose aggregates the table
// proves whole, and the others, which need a recompute.
func (c *Client) proveLoaded(ctx context.Context, loaded []pipeline.Touched) (proven, rest []pipeline.Touched, err error) {
	byID := make(map[string]pipeline.Touched, len(loaded))
	for _, t := range loaded {
		byID[t.VariableID] = t
	}
	for _, b := range batches(loaded, func(t pipeline.Touched) window { return aggWindow(t.Agg) }) {
		var got map[string]tableRows
		if err := c.Retry(ctx, TableDatapoints, func(ctx context.Context) (err error) {
			got, err = c.countLoaded(ctx, b, byID)
			return err
		}); err != nil {
			return nil, nil, fmt.Errorf("count the rows of %d variables over [%s, %s): %w", len(b.ids), msUTC(b.from), msUTC(b.to), err)
		}
		for _, id := range b.ids {
			t := byID[id]
			if g, ok := got[id]; ok && g.rows == t.Agg.Rows && g.newest == t.Agg.Latest.TsMs {
				proven = append(proven, t)
			} else {
				rest = append(rest, t)
			}
		}
	}
	return proven, rest, nil
}

// aggWindow is the hours an Aggregates covers, [first hour, last hour + 1).
func aggWindow(a *pipeline.Aggregates) window {
	return window{a.Hours[0].HourMs, a.Hours[len(a.Hours)-1].HourMs + hourMs}
}

// tableRows is what the table holds of one variable: its rows in the
// aggregated hours and its newest timestamp from their start on.
type tableRows struct {
	rows   int64
	newest int64
}

// countLoaded runs the check of one batch. Each variable's own window is
// applied by transform(), so that one statement serves variables whose
// windows differ (batches keeps them close).
func (c *Client) countLoaded(ctx context.Context, b batch, byID map[string]pipeline.Touched) (map[string]tableRows, error) {
	ids := quotedList(b.ids)
	var froms, tos strings.Builder
	for i, id := range b.ids {
		w := aggWindow(byID[id].Agg)
		if i > 0 {
			froms.WriteByte(',')
			tos.WriteByte(',')
		}
		froms.WriteString(strconv.FormatInt(w.from, 10))
		tos.WriteString(strconv.FormatInt(w.to, 10))
	}
	q := "SELECT variable_id, countIf(ts_ms < transform(variable_id, [" + ids + "], CAST([" + tos.String() + "] AS Array(Int64)), toInt64(0))), max(ts_ms) FROM " +
		c.Table(TableDatapoints) + " PREWHERE " + pointsWhere(ids, b.from, 0) +
		" WHERE ts_ms >= transform(variable_id, [" + ids + "], CAST([" + froms.String() + "] AS Array(Int64)), toInt64(0)) GROUP BY variable_id"
	rows, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]tableRows, len(b.ids))
	for rows.Next() {
		var id string
		var n uint64
		var newest int64
		if err := rows.Scan(&id, &n, &newest); err != nil {
			return nil, err
		}
		out[id] = tableRows{rows: int64(n), newest: newest}
	}
	return out, rows.Err()
}

// fromLoaded writes the rollups of the variables of loaded that the table
// proves whole and returns the others.
func (c *Client) fromLoaded(ctx context.Context, loaded []pipeline.Touched) ([]pipeline.Touched, error) {
	version := c.NextVersion()
	start := time.Now()
	proven, rest, err := c.proveLoaded(ctx, loaded)
	if err != nil || len(proven) == 0 {
		return rest, err
	}
	checked := time.Now()
	if err := c.writeLoaded(ctx, proven, version); err != nil {
		return nil, err
	}
	c.metrics.rollupVariables.WithLabelValues("loaded").Add(float64(len(proven)))
	c.log.Debug("rollups written from the loaded points", zap.Int("variables", len(proven)), zap.Int("unproven", len(rest)),
		zap.Duration("check", checked.Sub(start)), zap.Duration("write", time.Since(checked)))
	return rest, nil
}

// writeLoaded inserts the hourly and latest rows of proven variables.
func (c *Client) writeLoaded(ctx context.Context, proven []pipeline.Touched, version uint64) error {
	n := 0
	for _, t := range proven {
		n += len(t.Agg.Hours)
	}
	var (
		vid, dev            = make([]string, 0, n), make([]string, 0, n)
		hour                = make([]int64, 0, n)
		count               = make([]uint64, 0, n)
		sum, lo, hi, fv, lv = make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
		fts, lts            = make([]int64, 0, n), make([]int64, 0, n)
		ver                 = make([]uint64, 0, n)
	)
	for _, t := range proven {
		for _, h := range t.Agg.Hours {
			// The hour's device is its newest point's: a variable's points
			// of one pass share their device.
			vid, dev = append(vid, t.VariableID), append(dev, t.Agg.Latest.DeviceID)
			hour, count = append(hour, h.HourMs/1000), append(count, h.Count)
			sum, lo, hi = append(sum, h.Sum), append(lo, h.Min), append(hi, h.Max)
			fv, lv = append(fv, h.FirstValue), append(lv, h.LastValue)
			fts, lts = append(fts, h.FirstTsMs), append(lts, h.LastTsMs)
			ver = append(ver, version)
		}
	}
	hourly := []any{vid, dev, hour, count, sum, lo, hi, fv, lv, fts, lts, ver}
	if err := c.Retry(ctx, TableHourly, func(ctx context.Context) error {
		return c.insertColumns(ctx, TableHourly, hourlyColumns, hourly)
	}); err != nil {
		return fmt.Errorf("write %d rows of %s from the loaded points: %w", n, TableHourly, err)
	}
	c.metrics.rows.WithLabelValues(TableHourly).Add(float64(n))

	latest := make([]pipeline.Row, len(proven))
	for i, t := range proven {
		latest[i] = t.Agg.Latest
	}
	if err := c.Retry(ctx, TableLatest, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.Table(TableLatest)+" ("+latestColumns+")")
		if err != nil {
			return err
		}
		defer b.Abort()
		for _, r := range latest {
			var lat, lng *float64
			if r.HasLat {
				lat = &r.Lat
			}
			if r.HasLng {
				lng = &r.Lng
			}
			if err := b.Append(r.VariableID, r.DeviceID, r.DeviceLabel, r.VariableLabel, r.TsMs, floorSec(r.TsMs), r.Value, r.Context, lat, lng, version); err != nil {
				return err
			}
		}
		return b.Send()
	}); err != nil {
		return fmt.Errorf("write %d rows of %s from the loaded points: %w", len(latest), TableLatest, err)
	}
	c.metrics.rows.WithLabelValues(TableLatest).Add(float64(len(latest)))
	return nil
}

// insertColumns inserts whole columns, in the order of cols, into table.
func (c *Client) insertColumns(ctx context.Context, table, cols string, values []any) error {
	b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.Table(table)+" ("+cols+")")
	if err != nil {
		return err
	}
	defer b.Abort()
	for i, col := range values {
		if err := b.Column(i).Append(col); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return b.Send()
}
