package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse"
)

// The analyst queries of the README, from the raw table with FINAL and
// from the rollups; %[1]s is the database. TestAnalystQueriesAreTheREADMEs
// keeps them the README's own, so the figures are for the SQL users copy.
const (
	latestFinalSQL = `SELECT device_label, variable_label, argMax(value, ts_ms) AS value, max(ts) AS at
FROM %[1]s.datapoints FINAL
GROUP BY device_label, variable_label
ORDER BY device_label, variable_label`
	latestRollupSQL = `SELECT device_label, variable_label, value, ts AS at
FROM (SELECT device_label, variable_label, value, ts FROM %[1]s.datapoints_latest FINAL)
ORDER BY device_label, variable_label`
	hourlyFinalSQL = `SELECT device_label, toStartOfHour(ts) AS hour, avg(value) AS avg_value, count() AS points
FROM %[1]s.datapoints FINAL
WHERE variable_label = 'temperature' AND ts >= toStartOfHour(now()) - INTERVAL 30 DAY
GROUP BY device_label, hour
ORDER BY device_label, hour`
	// A variable's label is unique within its device, so each hourly row
	// of a 'temperature' variable is its device's hour: no GROUP BY.
	hourlyRollupSQL = `SELECT device_label, hour, sum / count AS avg_value, count AS points
FROM %[1]s.datapoints_hourly FINAL
ANY INNER JOIN (SELECT id AS variable_id, device_label FROM %[1]s.variables FINAL WHERE label = 'temperature' AND deleted = 0) USING variable_id
PREWHERE variable_id IN (SELECT id FROM %[1]s.variables FINAL WHERE label = 'temperature' AND deleted = 0)
WHERE count > 0 AND hour >= toStartOfHour(now()) - INTERVAL 30 DAY
ORDER BY device_label, hour`
)

// analystQueries builds the table (2,000 variables × 10,000 points
// over 30 days, 10 % of the points re-read once: 22 M rows), rebuilds its
// rollups as `fleetsync rollup` does, and times the README's latest-value
// and 30-day hourly queries from the raw table with FINAL and from the
// rollups, checking that both give the same answer.
func (b *bench) analystQueries(ctx context.Context) error {
	vars, points := 2000, 10000
	if b.o.quick {
		vars = 200
	}
	const db = "bench_rollup"
	sec := b.section(fmt.Sprintf("7. Analyst queries: %d variables × %d points over 30 d, 10 %% re-read once", vars, points))
	if err := b.migrate(ctx, db); err != nil {
		return err
	}
	defer b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil)
	now := time.Now()
	if _, err := b.chClient(ctx, generateSQL(db+".datapoints", 4, vars, points, 30*24*time.Hour, now.UnixMilli()), nil, nil); err != nil {
		return err
	}
	// The re-read: the same points again under a later version, as a
	// cycle's lookback loads them.
	if _, err := b.chClient(ctx, "INSERT INTO "+db+".datapoints ("+pointColumns+") SELECT variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng, version + 1 FROM "+
		db+".datapoints WHERE cityHash64(variable_id, ts_ms) % 10 = 0", nil, nil); err != nil {
		return err
	}
	if _, err := b.chClient(ctx, "INSERT INTO "+db+".variables (id, device_id, label, device_label, version) SELECT variable_id, any(device_id), any(variable_label), any(device_label), 1 FROM "+
		db+".datapoints GROUP BY variable_id", nil, nil); err != nil {
		return err
	}
	raw, err := b.count(ctx, db+".datapoints")
	if err != nil {
		return err
	}
	b.quiesce(ctx)
	c, err := clickhouse.Open(ctx, clickhouse.Config{Addr: []string{b.ch.Addr()}, Database: db, InsertTimeout: 30 * time.Minute, MaxElapsed: 30 * time.Minute}, nil, nil)
	if err != nil {
		return fmt.Errorf("open clickhouse: %w", err)
	}
	defer c.Close()
	began := time.Now()
	rebuilt, err := c.AnalystTables().Rebuild(ctx, now.Add(-31*24*time.Hour).UnixMilli(), now.UnixMilli())
	if err != nil {
		return fmt.Errorf("rebuild the rollups: %w", err)
	}
	rebuild := time.Since(began)
	b.logf("rollup: %d rows in datapoints; rollups of %d variables rebuilt in %.1fs", raw, rebuilt, rebuild.Seconds())
	b.quiesce(ctx)
	sec.note("`datapoints` filled by `INSERT … SELECT` from `numbers()` (the fleet shape of section 1) with %d rows, %d of them re-reads (same points, later version). The rollups were rebuilt once, as `fleetsync rollup --from (30 d ago) --to now` does, in %.1f s. Each query is timed by `clickhouse-client --time` with `FORMAT Null` (the server's work; sending the rows to a client costs both forms the same), the runs alternating between the forms; then both forms' answers are read as TSV and checked equal (numbers within 1e-9).",
		raw, raw-int64(vars)*int64(points), rebuild.Seconds())

	type query struct {
		name, sql string
		f         *figure
		rows      string
	}
	qs := []*query{
		{name: "latest value of every variable, `datapoints FINAL`", sql: latestFinalSQL},
		{name: "latest value of every variable, `datapoints_latest FINAL`", sql: latestRollupSQL},
		{name: "30-day hourly averages (temperature), `datapoints FINAL`", sql: hourlyFinalSQL},
		{name: "30-day hourly averages (temperature), `datapoints_hourly FINAL`", sql: hourlyRollupSQL},
	}
	for _, q := range qs {
		q.f = sec.fig("", q.name, "s", 3)
	}
	for r := range b.o.runs {
		for _, q := range qs {
			took, err := b.timedQuery(ctx, fmt.Sprintf(q.sql, db))
			if err != nil {
				return fmt.Errorf("%s: %w", q.name, err)
			}
			q.f.add(took)
			b.logf("run %d: %s: %.3fs", r+1, q.name, took)
		}
	}
	for _, q := range qs {
		if q.rows, err = b.chClient(ctx, fmt.Sprintf(q.sql, db)+" FORMAT TSV", nil, nil); err != nil {
			return fmt.Errorf("%s: %w", q.name, err)
		}
	}
	for i := 0; i < len(qs); i += 2 {
		if err := sameAnswer(qs[i].rows, qs[i+1].rows); err != nil {
			return fmt.Errorf("%s and %s answer differently: %w", qs[i].name, qs[i+1].name, err)
		}
	}
	latest := sec.fig("rollup-latest-speedup", "latest value: FINAL time / rollup time (medians)", "×", 0)
	latest.add(qs[0].f.median() / qs[1].f.median())
	hourly := sec.fig("rollup-hourly-speedup", "30-day hourly: FINAL time / rollup time (medians)", "×", 0)
	hourly.add(qs[2].f.median() / qs[3].f.median())
	sec.note("The latest-value queries return %d rows, the hourly ones %d.", strings.Count(qs[0].rows, "\n")+1, strings.Count(qs[2].rows, "\n")+1)
	return nil
}

// timedQuery runs sql through clickhouse-client with FORMAT Null and
// returns the elapsed time the client reports (--time).
func (b *bench) timedQuery(ctx context.Context, sql string) (float64, error) {
	cmd := exec.CommandContext(ctx, clientBinary, "--host", "127.0.0.1", "--port", b.chPort, "--time", "--query", sql+" FORMAT Null")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("clickhouse-client: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	f := strings.Fields(errb.String())
	if len(f) == 0 {
		return 0, fmt.Errorf("clickhouse-client --time printed nothing")
	}
	return strconv.ParseFloat(f[len(f)-1], 64)
}

// sameAnswer compares two answers in TSV cell by cell: numbers within
// 1e-9 (sum / count and avg round differently), the rest as text.
func sameAnswer(a, b string) error {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(la) != len(lb) {
		return fmt.Errorf("%d rows against %d", len(la), len(lb))
	}
	for i := range la {
		ca, cb := strings.Split(la[i], "\t"), strings.Split(lb[i], "\t")
		if len(ca) != len(cb) {
			return fmt.Errorf("row %d: %q against %q", i, la[i], lb[i])
		}
		for j := range ca {
			x, errx := strconv.ParseFloat(ca[j], 64)
			y, erry := strconv.ParseFloat(cb[j], 64)
			if errx == nil && erry == nil {
				if math.Abs(x-y) > 1e-9*math.Max(1, math.Abs(x)) {
					return fmt.Errorf("row %d column %d: %v against %v", i, j, x, y)
				}
			} else if ca[j] != cb[j] {
				return fmt.Errorf("row %d column %d: %q against %q", i, j, ca[j], cb[j])
			}
		}
	}
	return nil
}
