package clickhouse

import (
	"context"
	"fmt"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/verify"
)

// Stats summarises one variable's points in datapoints FINAL over a range:
// the warehouse's side of verify.
type Stats = verify.Stats

// Readback reads back what landed: the points' stats for verify (it is
// verify's Warehouse) and the variables for status (Client.Readback).
type Readback struct{ *pool }

var _ verify.Warehouse = (*Readback)(nil)

// PointStats returns, per variable with at least one point, the count, sum
// and timestamp range of its points in datapoints FINAL (deduplicated) with
// from <= ts_ms <= to. verify compares Count with the source's count. On
// a cluster it reads replicas that hold every point loaded before it
// (readReplicated), so that verify --repair sees what its repair loaded.
func (c *Readback) PointStats(ctx context.Context, from, to int64) (map[string]Stats, error) {
	var out map[string]Stats
	err := c.cluster().readReplicated(ctx, func(ctx context.Context) error {
		var err error
		out, err = c.pointStats(ctx, from, to)
		return err
	}, TableDatapoints)
	return out, err
}

// pointStats is PointStats' read.
func (c *Readback) pointStats(ctx context.Context, from, to int64) (map[string]Stats, error) {
	// The ts predicate lets ClickHouse skip whole monthly partitions; ts_ms
	// decides exactly.
	query := "SELECT variable_id, count(), sum(value), min(ts_ms), max(ts_ms) FROM " + c.table(TableDatapoints) +
		" FINAL WHERE ts >= toDateTime(?, 'UTC') AND ts <= toDateTime(?, 'UTC') AND ts_ms >= ? AND ts_ms <= ? GROUP BY variable_id"
	rows, err := c.conn.Query(ctx, query, floorSec(from), floorSec(to), from, to)
	if err != nil {
		return nil, fmt.Errorf("point stats from %s: %w", c.table(TableDatapoints), err)
	}
	defer rows.Close()
	out := map[string]Stats{}
	for rows.Next() {
		var id string
		var s Stats
		if err := rows.Scan(&id, &s.Count, &s.Sum, &s.MinTs, &s.MaxTs); err != nil {
			return nil, fmt.Errorf("point stats from %s: %w", c.table(TableDatapoints), err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("point stats from %s: %w", c.table(TableDatapoints), err)
	}
	return out, nil
}

// floorSec converts ms to whole seconds, clamped to DateTime's range.
func floorSec(ms int64) int64 {
	s := ms / 1000
	if ms%1000 < 0 {
		s--
	}
	return min(max(s, 0), 1<<32-1)
}

// Variables returns the live (not deleted) variables of the latest metadata
// snapshot, with the labels and lastActivity `fleetsync status` needs to
// compute lag without asking the source.
func (c *Readback) Variables(ctx context.Context) ([]pipeline.Variable, error) {
	query := "SELECT id, device_id, device_label, label, name, last_activity_ms FROM " + c.table(TableVariables) +
		" FINAL WHERE deleted = 0"
	rows, err := c.conn.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(TableVariables), err)
	}
	defer rows.Close()
	var out []pipeline.Variable
	for rows.Next() {
		var v pipeline.Variable
		if err := rows.Scan(&v.ID, &v.DeviceID, &v.DeviceLabel, &v.Label, &v.Name, &v.LastActivityMs); err != nil {
			return nil, fmt.Errorf("read %s: %w", c.table(TableVariables), err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(TableVariables), err)
	}
	return out, nil
}
