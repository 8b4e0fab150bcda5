package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Rows written from what a pass loaded. A recompute reads every point of
// the hours it replaces under FINAL; in a backfill that is every point just
// loaded, and costs ClickHouse nearly as much as the INSERTs did. When the
// pipeline hands a variable's Aggregates, one key-only count per batch
// (no FINAL, no value or context column) counts the table's rows from the
// start of the aggregated hours on, or all of them for variables loaded
// for the first time. If the count is the number of rows aggregated, the
// table holds those rows and no other there (they were acknowledged, so
// the table has at least them);
// the pipeline proved them distinct, so FINAL keeps each of them, the
// aggregates equal what the recompute would compute, and the newest row
// aggregated is the variable's latest (a newer one would have counted).
// Anything else (a re-read of the lookback, an older point in the first
// hour, a duplicate left by a failed INSERT, another writer) fails the
// check and the variable is recomputed as before.
//
// The version is taken before the check, as a recompute takes it before
// its statement reads: the argument of rollup.go holds unchanged, since the
// rows written are what a recompute would have computed from the check's
// snapshot.

// proveLoaded returns the variables of loaded whose aggregates the table
// proves whole, in the order of their ids (the rollup tables' sorting key,
// so ClickHouse need not sort the rows written from them), and the others,
// which need a recompute.
func (c *Client) proveLoaded(ctx context.Context, loaded []pipeline.Touched) (proven, rest []pipeline.Touched, err error) {
	byID := make(map[string]pipeline.Touched, len(loaded))
	for _, t := range loaded {
		byID[t.VariableID] = t
	}
	for _, b := range countGroups(loaded) {
		var want int64
		for _, id := range b.ids {
			want += byID[id].Agg.Rows
		}
		// The table holds at least every row aggregated, so a total equal
		// to their number proves each variable's count; only a batch that
		// fails it is counted per variable to find which.
		var total int64
		if err := c.Retry(ctx, TableDatapoints, func(ctx context.Context) (err error) {
			total, err = c.countBatch(ctx, b)
			return err
		}); err != nil {
			return nil, nil, fmt.Errorf("count the rows of %d variables%s: %w", len(b.ids), b.since(), err)
		}
		if total == want {
			for _, id := range b.ids {
				proven = append(proven, byID[id])
			}
			continue
		}
		var got map[string]int64
		if err := c.Retry(ctx, TableDatapoints, func(ctx context.Context) (err error) {
			got, err = c.countEach(ctx, b)
			return err
		}); err != nil {
			return nil, nil, fmt.Errorf("count the rows of %d variables%s: %w", len(b.ids), b.since(), err)
		}
		for _, id := range b.ids {
			if t := byID[id]; got[id] == t.Agg.Rows {
				proven = append(proven, t)
			} else {
				rest = append(rest, t)
			}
		}
	}
	slices.SortFunc(proven, func(a, b pipeline.Touched) int { return strings.Compare(a.VariableID, b.VariableID) })
	return proven, rest, nil
}

// aggWindow is the hours an Aggregates covers, [first hour, last hour + 1).
func aggWindow(a *pipeline.Aggregates) window {
	return window{a.Hours[0].HourMs(), a.Hours[len(a.Hours)-1].HourMs() + pipeline.HourMs}
}

// countGroup is one count of the check: the variables of b from b.from
// on, or every row of them when whole.
type countGroup struct {
	batch
	whole bool
}

// checkBatches groups loaded into counts. The variables loaded for the
// first time are counted whole, in runs of adjacent ids: a backfill loads
// them in that order, so each count reads one stretch of the sorting key,
// and it reads variable_id alone (a timestamp condition cost the count a
// third more CPU on 18.16). The others are counted from their first hour
// on, batched by window as a recompute is.
func countGroups(loaded []pipeline.Touched) []countGroup {
	var first []string
	var rest []pipeline.Touched
	for _, t := range loaded {
		if t.Agg.First {
			first = append(first, t.VariableID)
		} else {
			rest = append(rest, t)
		}
	}
	slices.Sort(first)
	var out []countGroup
	for ids := range slices.Chunk(first, rollupBatch) {
		out = append(out, countGroup{batch: batch{ids: ids}, whole: true})
	}
	for _, b := range batches(rest, func(t pipeline.Touched) window { return aggWindow(t.Agg) }) {
		out = append(out, countGroup{batch: b})
	}
	return out
}

// where is the count's condition. A batch that is not whole starts at the
// batch's start, which may be earlier than a variable's own first hour
// (batches keeps them within batchSlack): a row there fails the check,
// which only costs a recompute, while the variables share one condition (a
// start per variable, by transform(), cost the statement a third of its
// time).
func (b countGroup) where() string {
	if b.whole {
		return "variable_id IN (" + quotedList(b.ids) + ")"
	}
	return pointsWhere(quotedList(b.ids), b.from, 0)
}

// since names the rows a count reads, for its error.
func (b countGroup) since() string {
	if b.whole {
		return ""
	}
	return " from " + msUTC(b.from) + " on"
}

// countBatch counts the rows of all the variables of b.
func (c *Client) countBatch(ctx context.Context, b countGroup) (int64, error) {
	var n uint64
	err := c.conn.QueryRow(ctx, "SELECT count() FROM "+c.Table(TableDatapoints)+" PREWHERE "+b.where()).Scan(&n)
	return int64(n), err
}

// countEach counts the rows of each variable of b, as countBatch does.
func (c *Client) countEach(ctx context.Context, b countGroup) (map[string]int64, error) {
	rows, err := c.conn.Query(ctx, "SELECT variable_id, count() FROM "+c.Table(TableDatapoints)+
		" PREWHERE "+b.where()+" GROUP BY variable_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]int64, len(b.ids))
	for rows.Next() {
		var id string
		var n uint64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = int64(n)
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

// hourlyBlock bounds the hourly rows built and sent at once: a backfill's
// proven hours are hundreds of thousands of rows, and holding them as
// columns (and clickhouse-go's copy and encoding of them) at once cost more
// memory than the loaders' chunks. At 16k rows a commit still held 14 MB
// at a backfill's peak; the server joins the blocks of one INSERT into one
// part whatever their size, so small ones cost it nothing.
const hourlyBlock = 4 << 10

// hourlyCols are one block of datapoints_hourly columns, reused block to
// block.
type hourlyCols struct {
	vid, dev            []string
	hour                []int64
	count, ver          []uint64
	sum, lo, hi, fv, lv []float64
	fts, lts            []int64
}

func newHourlyCols(n int) *hourlyCols {
	return &hourlyCols{
		vid: make([]string, 0, n), dev: make([]string, 0, n), hour: make([]int64, 0, n), count: make([]uint64, 0, n), ver: make([]uint64, 0, n),
		sum: make([]float64, 0, n), lo: make([]float64, 0, n), hi: make([]float64, 0, n), fv: make([]float64, 0, n), lv: make([]float64, 0, n),
		fts: make([]int64, 0, n), lts: make([]int64, 0, n),
	}
}

func (h *hourlyCols) reset() {
	h.vid, h.dev, h.hour, h.count, h.ver = h.vid[:0], h.dev[:0], h.hour[:0], h.count[:0], h.ver[:0]
	h.sum, h.lo, h.hi, h.fv, h.lv = h.sum[:0], h.lo[:0], h.hi[:0], h.fv[:0], h.lv[:0]
	h.fts, h.lts = h.fts[:0], h.lts[:0]
}

// writeLoaded inserts the hourly and latest rows of proven variables.
func (c *Client) writeLoaded(ctx context.Context, proven []pipeline.Touched, version uint64) error {
	n := 0
	for _, t := range proven {
		n += len(t.Agg.Hours)
	}
	// The two INSERTs are independent and run side by side, as the
	// recompute's statements do: at the end of a pass nothing else waits
	// on the committer, and the latest rows need not wait for the hours.
	hourly := func() error {
		if err := c.Retry(ctx, TableHourly, func(ctx context.Context) error {
			return c.insertHourly(ctx, proven, version)
		}); err != nil {
			return fmt.Errorf("write %d rows of %s from the loaded points: %w", n, TableHourly, err)
		}
		c.metrics.rows.WithLabelValues(TableHourly).Add(float64(n))
		return nil
	}
	latest := func() error {
		if err := c.Retry(ctx, TableLatest, func(ctx context.Context) error {
			return c.insertLatest(ctx, proven, version)
		}); err != nil {
			return fmt.Errorf("write %d rows of %s from the loaded points: %w", len(proven), TableLatest, err)
		}
		c.metrics.rows.WithLabelValues(TableLatest).Add(float64(len(proven)))
		return nil
	}
	return pipeline.SideBySide(hourly, latest)
}

// insertLatest sends the latest rows of proven as one INSERT.
func (c *Client) insertLatest(ctx context.Context, proven []pipeline.Touched, version uint64) error {
	b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.Table(TableLatest)+" ("+latestColumns+")")
	if err != nil {
		return err
	}
	defer b.Abort()
	for _, t := range proven {
		r := t.Agg.Latest
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
}

// insertHourly sends the hours of proven as one INSERT, built and flushed
// hourlyBlock rows at a time.
func (c *Client) insertHourly(ctx context.Context, proven []pipeline.Touched, version uint64) error {
	b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.Table(TableHourly)+" ("+hourlyColumns+")")
	if err != nil {
		return err
	}
	defer b.Abort()
	h := newHourlyCols(hourlyBlock)
	flush := func() error {
		for i, col := range []any{h.vid, h.dev, h.hour, h.count, h.sum, h.lo, h.hi, h.fv, h.lv, h.fts, h.lts, h.ver} {
			if err := b.Column(i).Append(col); err != nil {
				return fmt.Errorf("column %d: %w", i, err)
			}
		}
		h.reset()
		return b.Flush()
	}
	for _, t := range proven {
		for _, a := range t.Agg.Hours {
			// The hour's device is its newest point's: a variable's points
			// of one pass share their device.
			h.vid, h.dev = append(h.vid, t.VariableID), append(h.dev, t.Agg.Latest.DeviceID)
			h.hour, h.count = append(h.hour, a.HourMs()/1000), append(h.count, uint64(a.Count))
			h.sum, h.lo, h.hi = append(h.sum, a.Sum), append(h.lo, a.Min), append(h.hi, a.Max)
			h.fv, h.lv = append(h.fv, a.FirstValue), append(h.lv, a.LastValue)
			h.fts, h.lts = append(h.fts, a.FirstTsMs()), append(h.lts, a.LastTsMs())
			h.ver = append(h.ver, version)
			if len(h.vid) == hourlyBlock {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if len(h.vid) > 0 {
		if err := flush(); err != nil {
			return err
		}
	}
	return b.Send()
}
