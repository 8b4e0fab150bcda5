// Package rolluptest checks the analyst tables (datapoints_latest,
// datapoints_hourly) against aggregates computed from scratch, in Go, over
// every row of `datapoints FINAL`. It imports testing, so only tests
// import it.
//
// The reference is computed independently of the SQL that keeps the
// tables (a mistake shared by both would otherwise pass). Every column is
// compared exactly except sum: ClickHouse adds an hour's values in the
// order its threads and parts give them, the reference in timestamp order,
// so sums are equal within 1e-9 of the sum of the absolute values.
package rolluptest

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/fleetsync/fleetsync/load/clickhouse"
)

// Hourly is one row of datapoints_hourly.
type Hourly struct {
	VariableID, DeviceID  string
	Hour                  time.Time
	Count                 uint64
	Sum, Min, Max         float64
	FirstValue, LastValue float64
	FirstTsMs, LastTsMs   int64
	absSum                float64
}

// Latest is one row of datapoints_latest.
type Latest struct {
	VariableID, DeviceID, DeviceLabel, VariableLabel string
	TsMs                                             int64
	Ts                                               time.Time
	Value                                            float64
	Context                                          string
	Lat, Lng                                         *float64
}

type hourKey struct {
	id   string
	hour int64
}

// Check compares every row of both tables with the reference and fails tb
// with the first mismatches. It also fails when datapoints is empty: a
// comparison of nothing proves nothing. It returns the number of hourly
// and latest rows compared.
func Check(tb testing.TB, c *clickhouse.Client) (hourly, latest int) {
	tb.Helper()
	ctx := context.Background()
	refH, refL, err := reference(ctx, c)
	if err != nil {
		tb.Fatalf("rollup reference: %v", err)
	}
	if len(refL) == 0 {
		tb.Fatalf("rollup check: datapoints is empty, nothing to compare")
	}
	gotH, gotL, err := read(ctx, c)
	if err != nil {
		tb.Fatalf("read the rollup tables: %v", err)
	}
	var diffs []string
	for k, want := range refH {
		got, ok := gotH[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("hourly %s %s: missing, want %+v", k.id, time.Unix(k.hour, 0).UTC().Format(time.RFC3339), want))
		case !sameHourly(got, want):
			diffs = append(diffs, fmt.Sprintf("hourly %s %s:\n   got  %+v\n   want %+v", k.id, time.Unix(k.hour, 0).UTC().Format(time.RFC3339), got, want))
		}
	}
	for k, got := range gotH {
		if _, ok := refH[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("hourly %s %s: extra row %+v (no point in that hour)", k.id, time.Unix(k.hour, 0).UTC().Format(time.RFC3339), got))
		}
	}
	for id, want := range refL {
		got, ok := gotL[id]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("latest %s: missing, want %s", id, want))
		case got.String() != want.String():
			diffs = append(diffs, fmt.Sprintf("latest %s:\n   got  %s\n   want %s", id, got, want))
		}
	}
	for id, got := range gotL {
		if _, ok := refL[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("latest %s: extra row %s", id, got))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		n := min(len(diffs), 10)
		tb.Errorf("rollups differ from the aggregates over datapoints FINAL in %d rows (of %d hourly, %d latest); the first %d:\n%s",
			len(diffs), len(refH), len(refL), n, joinLines(diffs[:n]))
	}
	return len(refH), len(refL)
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += "  " + l + "\n"
	}
	return out
}

func sameHourly(got, want Hourly) bool {
	tol := 1e-9 * math.Max(1, want.absSum)
	return got.DeviceID == want.DeviceID && got.Count == want.Count && math.Abs(got.Sum-want.Sum) <= tol &&
		got.Min == want.Min && got.Max == want.Max && got.FirstValue == want.FirstValue && got.LastValue == want.LastValue &&
		got.FirstTsMs == want.FirstTsMs && got.LastTsMs == want.LastTsMs
}

// String shows every column, NULLs as NULL, for comparison and messages.
func (l Latest) String() string {
	f := func(p *float64) string {
		if p == nil {
			return "NULL"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("{device=%s device_label=%q variable_label=%q ts_ms=%d ts=%s value=%v context=%s lat=%s lng=%s}",
		l.DeviceID, l.DeviceLabel, l.VariableLabel, l.TsMs, l.Ts.UTC().Format(time.RFC3339), l.Value, l.Context, f(l.Lat), f(l.Lng))
}

// pointColumns are the columns of a point, in datapoints and
// datapoints_latest alike.
const pointColumns = "variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng"

func scanPoint(rows driver.Rows) (Latest, error) {
	var p Latest
	err := rows.Scan(&p.VariableID, &p.DeviceID, &p.DeviceLabel, &p.VariableLabel, &p.TsMs, &p.Ts, &p.Value, &p.Context, &p.Lat, &p.Lng)
	return p, err
}

// reference computes both tables from every row of datapoints FINAL.
func reference(ctx context.Context, c *clickhouse.Client) (map[hourKey]Hourly, map[string]Latest, error) {
	rows, err := c.Conn().Query(ctx, "SELECT "+pointColumns+" FROM "+
		c.Table(clickhouse.TableDatapoints)+" FINAL ORDER BY variable_id, ts_ms")
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	hourly := map[hourKey]Hourly{}
	latest := map[string]Latest{}
	for rows.Next() {
		p, err := scanPoint(rows)
		if err != nil {
			return nil, nil, err
		}
		// Rows come in timestamp order: the last one of a variable is its
		// newest, the first of an hour its first.
		latest[p.VariableID] = p
		k := hourKey{p.VariableID, p.Ts.Unix() - p.Ts.Unix()%3600}
		h, ok := hourly[k]
		if !ok {
			h = Hourly{VariableID: p.VariableID, Hour: time.Unix(k.hour, 0).UTC(), Min: p.Value, Max: p.Value, FirstValue: p.Value, FirstTsMs: p.TsMs}
		}
		h.DeviceID = p.DeviceID
		h.Count++
		h.Sum += p.Value
		h.absSum += math.Abs(p.Value)
		h.Min, h.Max = math.Min(h.Min, p.Value), math.Max(h.Max, p.Value)
		h.LastValue, h.LastTsMs = p.Value, p.TsMs
		hourly[k] = h
	}
	return hourly, latest, rows.Err()
}

// read reads both tables with FINAL, as analysts do.
func read(ctx context.Context, c *clickhouse.Client) (map[hourKey]Hourly, map[string]Latest, error) {
	hourly := map[hourKey]Hourly{}
	rows, err := c.Conn().Query(ctx, "SELECT variable_id, device_id, hour, count, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms FROM "+
		c.Table(clickhouse.TableHourly)+" FINAL")
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var h Hourly
		if err := rows.Scan(&h.VariableID, &h.DeviceID, &h.Hour, &h.Count, &h.Sum, &h.Min, &h.Max, &h.FirstValue, &h.LastValue, &h.FirstTsMs, &h.LastTsMs); err != nil {
			return nil, nil, err
		}
		k := hourKey{h.VariableID, h.Hour.Unix()}
		if _, dup := hourly[k]; dup {
			return nil, nil, fmt.Errorf("datapoints_hourly FINAL has two rows for %s %s", k.id, h.Hour)
		}
		if h.Count == 0 {
			continue // an hour emptied by a deletion, which the README's queries skip
		}
		hourly[k] = h
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	latest := map[string]Latest{}
	lrows, err := c.Conn().Query(ctx, "SELECT "+pointColumns+" FROM "+
		c.Table(clickhouse.TableLatest)+" FINAL")
	if err != nil {
		return nil, nil, err
	}
	defer lrows.Close()
	for lrows.Next() {
		p, err := scanPoint(lrows)
		if err != nil {
			return nil, nil, err
		}
		if _, dup := latest[p.VariableID]; dup {
			return nil, nil, fmt.Errorf("datapoints_latest FINAL has two rows for %s", p.VariableID)
		}
		latest[p.VariableID] = p
	}
	return hourly, latest, lrows.Err()
}
