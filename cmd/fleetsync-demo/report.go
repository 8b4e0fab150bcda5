package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The demo's analyst queries, printed with their results. They read with
// FINAL, as every query on fleetsync's tables should: the latest values
// from the rollup every cycle keeps, the hourly averages from datapoints.
var demoQueries = []struct{ title, sql string }{
	{"Latest value of every variable, per device", `SELECT device_label, variable_label,
       value AS latest_value, toString(ts) AS at
FROM {db}.datapoints_latest FINAL
ORDER BY device_label, variable_label
LIMIT 12`},
	{"Hourly average temperature of the last 6 hours of data", `SELECT device_label, toString(toStartOfHour(ts)) AS hour,
       round(avg(value), 2) AS avg_value, count() AS points
FROM {db}.datapoints FINAL
WHERE variable_label LIKE 'temperature%'
  AND ts >= (SELECT max(ts) FROM {db}.datapoints) - 6 * 3600
GROUP BY device_label, hour
ORDER BY device_label, hour
LIMIT 12`},
}

// report prints how many points the sync left in the demo's database and
// the results of demoQueries.
func report(ctx context.Context, addr string, took time.Duration, stdout io.Writer) error {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("connect to ClickHouse %s for the demo queries: %w", addr, err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+demoDatabase+".datapoints FINAL").Scan(&n); err != nil {
		return fmt.Errorf("count the loaded points: %w", err)
	}
	fmt.Fprintf(stdout, "\nSynced %d points into ClickHouse %s, database %s, in %s.\n", n, addr, demoDatabase, took.Round(time.Millisecond))
	fmt.Fprintf(stdout, "Run it again: the second cycle reads only what is new.\n")
	for _, q := range demoQueries {
		sql := strings.ReplaceAll(q.sql, "{db}", demoDatabase)
		fmt.Fprintf(stdout, "\n-- %s\n%s;\n\n", q.title, sql)
		if err := printQuery(ctx, conn, stdout, sql); err != nil {
			return err
		}
	}
	return nil
}

// printQuery prints the result of sql as an aligned table.
func printQuery(ctx context.Context, conn driver.Conn, w io.Writer, sql string) error {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return fmt.Errorf("demo query: %w", err)
	}
	defer rows.Close()
	cols := rows.Columns()
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	types := rows.ColumnTypes()
	for rows.Next() {
		vals := make([]any, len(cols))
		for i, t := range types {
			vals[i] = newScanTarget(t.DatabaseTypeName())
		}
		if err := rows.Scan(vals...); err != nil {
			return fmt.Errorf("demo query: %w", err)
		}
		cells := make([]string, len(vals))
		for i, v := range vals {
			cells[i] = fmt.Sprint(deref(v))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := rows.Err(); err != nil {
		return errors.Join(fmt.Errorf("demo query: %w", err), tw.Flush())
	}
	return tw.Flush()
}

// newScanTarget returns a pointer to scan a column of ClickHouse type
// chType into; the demo's queries return only these types and strings.
func newScanTarget(chType string) any {
	switch chType {
	case "Float64":
		return new(float64)
	case "UInt64":
		return new(uint64)
	case "Int64":
		return new(int64)
	default:
		return new(string)
	}
}

// deref returns the value a newScanTarget pointer holds.
func deref(v any) any {
	switch p := v.(type) {
	case *float64:
		return *p
	case *uint64:
		return *p
	case *int64:
		return *p
	case *string:
		return *p
	}
	return v
}
