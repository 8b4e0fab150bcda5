package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Rebuild makes both analyst tables equal to datapoints FINAL as it is now
// over the hours of [from, to] (POSIX ms, inclusive): what `fleetsync
// rollup` does after the tables were off, or after datapoints was fixed by
// hand (ALTER TABLE ... DELETE). Unlike a cycle's Recompute, which only
// ever adds points to hours, it also covers what a deletion leaves:
//
//   - every variable with a point in the range, or an hourly row there, is
//     rebuilt, not only those with points;
//   - an hour in the range that has a row but no point left gets a row
//     with count = 0, which replaces the old one under FINAL and which the
//     README's queries skip (WHERE count > 0): ReplacingMergeTree cannot
//     drop a row, only replace it;
//   - the latest row is recomputed from all of the variable's points, so
//     it is the newest point whether or not that lies in the range or the
//     range's last hour.
//
// A variable with no point left at all keeps its latest row: nothing can
// replace it. It returns the number of variables rebuilt.
//
// Each statement's version is taken before its snapshot of datapoints, as
// in Recompute, so a cycle loading into the same hours meanwhile still
// leaves the exact row.
//
// On a cluster it reads replicas that hold every point and hourly row
// written before it (readReplicated).
func (c *AnalystTables) Rebuild(ctx context.Context, from, to int64) (int, error) {
	lo, hi := hourStart(from), hourStart(to)+hourMs
	var n int
	err := c.cluster().readReplicated(ctx, func(ctx context.Context) error {
		ids, err := c.rebuildVariables(ctx, lo, hi)
		if err != nil {
			return err
		}
		n = len(ids)
		return c.rebuild(ctx, ids, lo, hi)
	}, TableDatapoints, TableHourly)
	return n, err
}

// rebuild rebuilds the hours [lo, hi) and the latest rows of the variables
// ids (see Rebuild).
func (c *AnalystTables) rebuild(ctx context.Context, ids []string, lo, hi int64) error {
	for start := 0; start < len(ids); start += rollupBatch {
		b := ids[start:min(start+rollupBatch, len(ids))]
		in := quotedList(b)
		if err := c.retry(ctx, TableHourly, func(ctx context.Context) error {
			return c.conn.Exec(ctx, c.hourlySQL(in, lo, hi, c.nextVersion()))
		}); err != nil {
			return fmt.Errorf("rebuild %s for %d variables over [%s, %s): %w", TableHourly, len(b), msUTC(lo), msUTC(hi), err)
		}
		if err := c.emptyHours(ctx, in, lo, hi); err != nil {
			return err
		}
		if err := c.retry(ctx, TableLatest, func(ctx context.Context) error {
			return c.conn.Exec(ctx, c.latestSQL(in, 0, c.nextVersion()))
		}); err != nil {
			return fmt.Errorf("rebuild %s for %d variables: %w", TableLatest, len(b), err)
		}
	}
	return nil
}

// rebuildVariables lists, sorted, the variables with a point or a live
// hourly row in [lo, hi).
func (c *AnalystTables) rebuildVariables(ctx context.Context, lo, hi int64) ([]string, error) {
	seen := map[string]bool{}
	for _, q := range []string{
		"SELECT DISTINCT variable_id FROM " + c.table(TableDatapoints) + " WHERE " + rangeWhere(lo, hi),
		fmt.Sprintf("SELECT DISTINCT variable_id FROM %s WHERE hour >= toDateTime(%d) AND hour < toDateTime(%d)", c.table(TableHourly), lo/1000, hi/1000),
	} {
		rows, err := c.conn.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("list the variables to rebuild over [%s, %s): %w", msUTC(lo), msUTC(hi), err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list the variables to rebuild: %w", err)
			}
			seen[id] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("list the variables to rebuild: %w", err)
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// emptyHours writes a count = 0 row for every hour of the variables in
// `in` within [lo, hi) whose hourly row counts points that datapoints no
// longer holds. The hours are compared in Go, not by a NOT IN subquery: on
// a cluster both tables are Distributed, and ClickHouse refuses a
// Distributed subquery inside a Distributed query by default.
func (c *AnalystTables) emptyHours(ctx context.Context, in string, lo, hi int64) error {
	version := c.nextVersion()
	type key struct {
		id   string
		hour int64
	}
	held := map[key]bool{}
	rows, err := c.conn.Query(ctx, "SELECT DISTINCT variable_id, toUInt32(toStartOfHour(ts)) FROM "+c.table(TableDatapoints)+" WHERE "+pointsWhere(in, lo, hi))
	if err != nil {
		return fmt.Errorf("list the hours with points: %w", err)
	}
	for rows.Next() {
		var k key
		var h uint32
		if err := rows.Scan(&k.id, &h); err != nil {
			rows.Close()
			return fmt.Errorf("list the hours with points: %w", err)
		}
		k.hour = int64(h)
		held[k] = true
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("list the hours with points: %w", err)
	}
	type stale struct {
		id, device string
		hour       time.Time
	}
	var empty []stale
	q := fmt.Sprintf("SELECT variable_id, device_id, hour FROM (SELECT variable_id, device_id, hour, count FROM %s FINAL PREWHERE variable_id IN (%s) AND hour >= toDateTime(%d) AND hour < toDateTime(%d)) WHERE count > 0",
		c.table(TableHourly), in, lo/1000, hi/1000)
	rows, err = c.conn.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("list the hourly rows: %w", err)
	}
	for rows.Next() {
		var s stale
		if err := rows.Scan(&s.id, &s.device, &s.hour); err != nil {
			rows.Close()
			return fmt.Errorf("list the hourly rows: %w", err)
		}
		if !held[key{s.id, s.hour.Unix()}] {
			empty = append(empty, s)
		}
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("list the hourly rows: %w", err)
	}
	place, err := c.cluster().placementFor(ctx)
	if err != nil {
		return err
	}
	return c.insertRows(ctx, TableHourly, hourlyColumns+c.cluster().keyColumn(), len(empty), func(i int) []any {
		s := empty[i]
		row := []any{s.id, s.device, s.hour, uint64(0), 0.0, 0.0, 0.0, 0.0, 0.0, int64(0), int64(0), version}
		if place != nil {
			// On a cluster, beside the variable's other rows.
			row = append(row, place.key(s.id))
		}
		return row
	})
}
