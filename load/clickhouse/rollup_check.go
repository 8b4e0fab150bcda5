package clickhouse

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// CheckRollups compares the analyst tables with the same aggregates over
// datapoints FINAL: the hourly rows of every hour that [from, to] (POSIX
// ms, inclusive) touches, and the latest row of every variable with a
// point in those hours. Both sides are computed by ClickHouse and compared
// here, column by column: exactly, except sum, which both sides compute
// with hourlySum, whose result depends on the order ClickHouse adds the
// points in only within the bound sameSum allows. A row with count = 0
// (an hour a rebuild emptied) counts as no row. Nothing is compared inside SQL with a join or a subquery over two
// tables, so it runs unchanged on a cluster's Distributed tables.
//
// On a cluster it reads replicas that hold every row written before it
// (readReplicated), so that verify --repair sees its own repair.
func (c *AnalystTables) CheckRollups(ctx context.Context, from, to int64) (TablesReport, error) {
	var rep TablesReport
	err := c.cluster().readReplicated(ctx, func(ctx context.Context) error {
		var err error
		rep, err = c.checkRollups(ctx, from, to)
		return err
	}, TableDatapoints, TableHourly, TableLatest)
	return rep, err
}

// checkRollups is CheckRollups' reads and comparison.
func (c *AnalystTables) checkRollups(ctx context.Context, from, to int64) (TablesReport, error) {
	lo, hi := hourStart(from), hourStart(to)+hourMs
	var rep TablesReport
	// The variables with a point or a row in those hours, rollupBatch at a
	// time: memory holds one batch's hours, not the range's.
	ids, err := c.rebuildVariables(ctx, lo, hi)
	if err != nil {
		return rep, err
	}
	for start := 0; start < len(ids); start += rollupBatch {
		if err := c.checkBatch(ctx, quotedList(ids[start:min(start+rollupBatch, len(ids))]), lo, hi, &rep); err != nil {
			return rep, err
		}
	}
	sort.Slice(rep.Diffs, func(i, j int) bool {
		a, b := rep.Diffs[i], rep.Diffs[j]
		return a.VariableID < b.VariableID || (a.VariableID == b.VariableID && (a.Table < b.Table || (a.Table == b.Table && a.HourMs < b.HourMs)))
	})
	return rep, nil
}

// checkBatch adds to rep the differences of the variables in `in` over the
// hours [lo, hi), and their latest rows.
func (c *AnalystTables) checkBatch(ctx context.Context, in string, lo, hi int64, rep *TablesReport) error {
	want, err := c.hourlyRows(ctx, "SELECT "+hourlyAggregates+", sum(abs("+restPart+")) FROM "+c.table(TableDatapoints)+
		" FINAL PREWHERE "+pointsWhere(in, lo, hi)+" GROUP BY variable_id, hour", true)
	if err != nil {
		return fmt.Errorf("aggregate datapoints FINAL by hour over [%s, %s): %w", msUTC(lo), msUTC(hi), err)
	}
	got, err := c.hourlyRows(ctx, fmt.Sprintf("SELECT variable_id, device_id, hour, count, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms FROM %s FINAL PREWHERE variable_id IN (%s) AND hour >= toDateTime(%d) AND hour < toDateTime(%d) WHERE count > 0",
		c.table(TableHourly), in, lo/1000, hi/1000), false)
	if err != nil {
		return fmt.Errorf("read %s over [%s, %s): %w", TableHourly, msUTC(lo), msUTC(hi), err)
	}
	rep.Hours += len(want)
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			rep.Diffs = append(rep.Diffs, TableDiff{Table: TableHourly, VariableID: k.id, HourMs: k.hour, Problem: "missing"})
		default:
			if p := w.differs(g); p != "" {
				rep.Diffs = append(rep.Diffs, TableDiff{Table: TableHourly, VariableID: k.id, HourMs: k.hour, Problem: p})
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			rep.Diffs = append(rep.Diffs, TableDiff{Table: TableHourly, VariableID: k.id, HourMs: k.hour, Problem: "extra: no point in that hour"})
		}
	}
	wantL, err := c.latestRows(ctx, "SELECT "+latestFields+" FROM (SELECT "+latestAggregate+" FROM "+c.table(TableDatapoints)+
		" WHERE variable_id IN ("+in+") GROUP BY variable_id)")
	if err != nil {
		return fmt.Errorf("aggregate the newest points: %w", err)
	}
	gotL, err := c.latestRows(ctx, "SELECT variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng FROM "+
		c.table(TableLatest)+" FINAL PREWHERE variable_id IN ("+in+")")
	if err != nil {
		return fmt.Errorf("read %s: %w", TableLatest, err)
	}
	rep.Latest += len(wantL)
	for id, w := range wantL {
		g, ok := gotL[id]
		switch {
		case !ok:
			rep.Diffs = append(rep.Diffs, TableDiff{Table: TableLatest, VariableID: id, Problem: "missing"})
		case g != w:
			rep.Diffs = append(rep.Diffs, TableDiff{Table: TableLatest, VariableID: id, Problem: "got " + g.String() + ", want " + w.String()})
		}
	}
	for id, g := range gotL {
		if _, ok := wantL[id]; !ok {
			rep.Diffs = append(rep.Diffs, TableDiff{Table: TableLatest, VariableID: id, Problem: "extra: the variable has no point; holds " + g.String()})
		}
	}
	return nil
}

// RepairRollups rewrites exactly the rows of diffs (from CheckRollups):
// each variable's differing hours, a run of consecutive hours per
// statement, recomputed from datapoints FINAL (an hour with no point left
// gets a count = 0 row, see Rebuild), and the latest rows that differ.
// On a cluster it reads replicas that hold every point and hourly row
// written before it (readReplicated).
func (c *AnalystTables) RepairRollups(ctx context.Context, diffs []TableDiff) error {
	return c.cluster().readReplicated(ctx, func(ctx context.Context) error { return c.repairRollups(ctx, diffs) }, TableDatapoints, TableHourly)
}

// repairRollups is RepairRollups' statements.
func (c *AnalystTables) repairRollups(ctx context.Context, diffs []TableDiff) error {
	hours := map[string][]int64{}
	var latest []string
	for _, d := range diffs {
		if d.Table == TableLatest {
			latest = append(latest, d.VariableID)
		} else {
			hours[d.VariableID] = append(hours[d.VariableID], d.HourMs)
		}
	}
	for id, hs := range hours {
		sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
		in := quotedList([]string{id})
		for i := 0; i < len(hs); {
			j := i + 1
			for j < len(hs) && hs[j] == hs[j-1]+hourMs {
				j++
			}
			lo, hi := hs[i], hs[j-1]+hourMs
			if err := c.retry(ctx, TableHourly, func(ctx context.Context) error {
				return c.conn.Exec(ctx, c.hourlySQL(in, lo, hi, c.nextVersion()))
			}); err != nil {
				return fmt.Errorf("rewrite %s of %s over [%s, %s): %w", TableHourly, id, msUTC(lo), msUTC(hi), err)
			}
			if err := c.emptyHours(ctx, in, lo, hi); err != nil {
				return err
			}
			i = j
		}
	}
	sort.Strings(latest)
	for start := 0; start < len(latest); start += rollupBatch {
		b := latest[start:min(start+rollupBatch, len(latest))]
		if err := c.retry(ctx, TableLatest, func(ctx context.Context) error {
			return c.conn.Exec(ctx, c.latestSQL(quotedList(b), 0, c.nextVersion()))
		}); err != nil {
			return fmt.Errorf("rewrite %s of %d variables: %w", TableLatest, len(b), err)
		}
	}
	return nil
}

type hourKey struct {
	id   string
	hour int64 // ms
}

// hourlyRow is one hourly row, as stored or as computed.
type hourlyRow struct {
	device                     string
	count                      uint64
	sum, min, max, first, last float64
	firstTs, lastTs            int64
	// restAbs is the sum of the absolute values of the rests hourlySum
	// adds as Float64, on the computed side.
	restAbs float64
}

// differs names the columns of got that differ from r, the expected row.
func (r hourlyRow) differs(got hourlyRow) string {
	var p []string
	if got.device != r.device {
		p = append(p, fmt.Sprintf("device_id %q want %q", got.device, r.device))
	}
	if got.count != r.count {
		p = append(p, fmt.Sprintf("count %d want %d", got.count, r.count))
	}
	if !sameSum(got.sum, r.sum, r.restAbs, r.count) {
		p = append(p, fmt.Sprintf("sum %v want %v", got.sum, r.sum))
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{{"min", got.min, r.min}, {"max", got.max, r.max}, {"first_value", got.first, r.first}, {"last_value", got.last, r.last}} {
		if f.got != f.want && !(math.IsNaN(f.got) && math.IsNaN(f.want)) {
			p = append(p, fmt.Sprintf("%s %v want %v", f.name, f.got, f.want))
		}
	}
	if got.firstTs != r.firstTs || got.lastTs != r.lastTs {
		p = append(p, fmt.Sprintf("first..last_ts_ms %d..%d want %d..%d", got.firstTs, got.lastTs, r.firstTs, r.lastTs))
	}
	return strings.Join(p, ", ")
}

// sameSum reports whether got and want are hourlySum of the same n
// values, added in two orders: both NaN, equal, or within the bound below
// (an infinite or NaN sum equals only itself). restAbs is the sum of the
// absolute values of the rests hourlySum adds as Float64.
//
// The two exact parts are the same number on both sides. Each side's sum
// of the rests is within γ(n-1)·Σ|rest| of the true one, whatever order
// ClickHouse added them in (see hourlySum), u = 2^-53: taken here as
// e = n·u·restAbs·(1+n·u)², the last factor also for restAbs itself being
// such a sum. Each side then rounds its final addition once, by at most u
// times its result. So
//
//	|got - want| <= 2e + u·(|got| + |want|).
//
// For integer values (below 1e30) restAbs is 0 and the two sums are equal.
func sameSum(got, want, restAbs float64, n uint64) bool {
	switch {
	case math.IsNaN(got) || math.IsNaN(want):
		return math.IsNaN(got) && math.IsNaN(want)
	case got == want:
		return true
	case math.IsInf(got, 0) || math.IsInf(want, 0) || math.IsInf(restAbs, 0):
		return false
	}
	const u = 0x1p-53
	k := float64(n)
	e := k * u * restAbs * (1 + k*u) * (1 + k*u)
	return math.Abs(got-want) <= 2*e+u*(math.Abs(got)+math.Abs(want))
}

// hourlyRows runs q, whose columns are hourlyColumns without the version
// (plus the sum of the absolute values of hourlySum's rests when abs),
// into rows by key.
func (c *AnalystTables) hourlyRows(ctx context.Context, q string, abs bool) (map[hourKey]hourlyRow, error) {
	rows, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[hourKey]hourlyRow{}
	for rows.Next() {
		var (
			id   string
			hour time.Time
			r    hourlyRow
		)
		dest := []any{&id, &r.device, &hour, &r.count, &r.sum, &r.min, &r.max, &r.first, &r.last, &r.firstTs, &r.lastTs}
		if abs {
			dest = append(dest, &r.restAbs)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out[hourKey{id, hour.UnixMilli()}] = r
	}
	return out, rows.Err()
}

// latestRow is one latest row, as stored or as computed, comparable with ==
// (a NaN value is held as its bits).
type latestRow struct {
	device, deviceLabel, variableLabel string
	tsMs                               int64
	value                              uint64
	context                            string
	lat, lng                           string
}

func (l latestRow) String() string {
	return fmt.Sprintf("{ts_ms=%d value=%v context=%s lat=%s lng=%s device=%s labels=%s/%s}",
		l.tsMs, math.Float64frombits(l.value), l.context, l.lat, l.lng, l.device, l.deviceLabel, l.variableLabel)
}

// latestRows runs q, whose columns are latestColumns without the version,
// into rows by variable.
func (c *AnalystTables) latestRows(ctx context.Context, q string) (map[string]latestRow, error) {
	rows, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]latestRow{}
	for rows.Next() {
		var (
			id       string
			ts       time.Time
			value    float64
			lat, lng *float64
			r        latestRow
		)
		if err := rows.Scan(&id, &r.device, &r.deviceLabel, &r.variableLabel, &r.tsMs, &ts, &value, &r.context, &lat, &lng); err != nil {
			return nil, err
		}
		r.value = math.Float64bits(value)
		if math.IsNaN(value) {
			r.value = math.Float64bits(math.NaN())
		}
		r.lat, r.lng = nullable(lat), nullable(lng)
		out[id] = r
	}
	return out, rows.Err()
}

func nullable(p *float64) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}
