package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetsync/fleetsync/config"
	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
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

func cmdDemo(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync demo [--devices N] [--variables N] [--points N]")
	devices := fs.Int("devices", 6, "devices in the embedded fleet")
	variables := fs.Int("variables", 4, "variables per device")
	points := fs.Int("points", 5000, "points per variable, over the last 7 days")
	chAddr := fs.String("clickhouse", "127.0.0.1:9000", "ClickHouse to use when one answers there; otherwise a local server is started")
	dir := fs.String("dir", ".demo", "directory for a ClickHouse the demo starts (kept between runs)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	addr := *chAddr
	if !chserver.Reachable(ctx, addr) {
		fmt.Fprintf(env.stderr, "no ClickHouse answers at %s; starting a local clickhouse-server in %s/clickhouse ...\n", addr, *dir)
		srv, err := chserver.Start(ctx, chserver.Options{Dir: *dir + "/clickhouse"})
		if err != nil {
			return fmt.Errorf("start a local ClickHouse: %w (install it with 'apt-get install -y clickhouse-server clickhouse-client', or point --clickhouse at a running server)", err)
		}
		defer srv.Stop()
		addr = srv.Addr()
	}

	const token = "demo-token"
	sim, err := fleetsim.New(fleetsim.Options{Seed: 42, Devices: *devices, Variables: *variables, Points: *points,
		Span: 7 * 24 * time.Hour, Tokens: []string{token}})
	if err != nil {
		return fmt.Errorf("start the embedded fleetsim: %w", err)
	}
	defer sim.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the embedded fleetsim: %w", err)
	}
	hs := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	baseURL := "http://" + ln.Addr().String()
	fmt.Fprintf(env.stderr, "embedded fleetsim serving %d devices x %d variables x %d points at %s\n", *devices, *variables, *points, baseURL)

	cfg := config.Default()
	cfg.Source.BaseURL = baseURL
	cfg.Source.Token = config.Secret(token)
	// The embedded simulator has no rate limit: no cautious start.
	cfg.Source.InitialRequestsPerSecond = 0
	cfg.ClickHouse.Addr = []string{addr}
	cfg.ClickHouse.Database = "fleetsync_demo"
	cfg.Log.Format = "console"
	cfg.Log.Level = "warn"
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, err := openApp(ctx, env, cfg, true)
	if err != nil {
		return err
	}
	defer a.Close()
	start := time.Now()
	if err := a.syncOnce(ctx); err != nil {
		return err
	}
	took := time.Since(start)

	conn := a.ch.Conn()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM fleetsync_demo.datapoints FINAL").Scan(&n); err != nil {
		return fmt.Errorf("count the loaded points: %w", err)
	}
	fmt.Fprintf(env.stdout, "\nSynced %d points into ClickHouse %s, database fleetsync_demo, in %s.\n", n, addr, took.Round(time.Millisecond))
	fmt.Fprintf(env.stdout, "Run it again: the second cycle reads only what is new.\n")
	for _, q := range demoQueries {
		sql := strings.ReplaceAll(q.sql, "{db}", "fleetsync_demo")
		fmt.Fprintf(env.stdout, "\n-- %s\n%s;\n\n", q.title, sql)
		if err := printQuery(ctx, a, env, sql); err != nil {
			return err
		}
	}
	return nil
}

func printQuery(ctx context.Context, a *app, env *cliEnv, sql string) error {
	rows, err := a.ch.Conn().Query(ctx, sql)
	if err != nil {
		return fmt.Errorf("demo query: %w", err)
	}
	defer rows.Close()
	cols := rows.Columns()
	tw := tabwriter.NewWriter(env.stdout, 2, 4, 2, ' ', 0)
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
