package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse"
)

// pointColumns is the column list fleetsync's loader names in its INSERT
// (load/clickhouse pointColumnList); the ceiling inserts exactly these, so
// the server does the same work per row.
const pointColumns = "variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng, version"

// migrate creates database db with fleetsync's own schema code, so the
// ceiling's table is identical to the one fleetsync loads.
func (b *bench) migrate(ctx context.Context, db string) error {
	c, err := clickhouse.Open(ctx, clickhouse.Config{Addr: []string{b.ch.Addr()}, Database: db}, nil, nil)
	if err != nil {
		return fmt.Errorf("open clickhouse: %w", err)
	}
	defer c.Close()
	if err := c.Schema().Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", db, err)
	}
	return nil
}

// generateSQL fills table with vars × points rows shaped like fleetsim's
// fleet: 24-hex ids, tracker-NNNN devices, kinds cycling temperature,
// humidity, battery, position (lat/lng context with 6 decimals, NULL lat/lng
// otherwise), points spread over span ending at endMs with a jitter under
// half a step, ~1 % and 2 % of special contexts, one version for all rows
// as one fleetsync INSERT has.
func generateSQL(table string, varsPerDevice, vars, points int, span time.Duration, endMs int64) string {
	n := int64(vars) * int64(points)
	step := span.Milliseconds() / int64(points)
	q := `INSERT INTO {table} ({cols})
SELECT
  lower(concat(hex(cityHash64('var', v)), substring(hex(cityHash64('var2', v)), 1, 8))),
  lower(concat(hex(cityHash64('dev', d)), substring(hex(cityHash64('dev2', d)), 1, 8))),
  concat('tracker-', substring(toString(10000 + d), 2)),
  arrayElement(['temperature', 'humidity', 'battery', 'position'], k + 1),
  tsms,
  toDateTime(intDiv(tsms, 1000), 'UTC'),
  multiIf(k = 0, round(21 + 6 * sin(i / 50), 2), k = 1, round((h % 1000) / 10, 1), k = 2, round(100 - 60 * i / {P}, 2), round((h % 500) / 10, 1)),
  multiIf(k = 3, concat('{"lat":', toString(la), ',"lng":', toString(ln), '}'), k = 0 AND h % 100 = 0, '{"sensor":"probe-2"}', k = 2 AND h % 50 = 0, '{"charging":true}', '{}'),
  if(k = 3, la, NULL),
  if(k = 3, ln, NULL),
  toUInt64({version})
FROM (
  SELECT number, intDiv(number, {P}) AS v, number % {P} AS i, intDiv(v, {VPD}) AS d, v % 4 AS k,
    cityHash64(number) AS h,
    toInt64({end} - ({P} - 1 - i) * {step} - (h % {half})) AS tsms,
    round(47 + (h % 2000000) / 1000000, 6) AS la,
    round(11 + (intDiv(h, 7) % 2000000) / 1000000, 6) AS ln
  FROM numbers({N})
)`
	r := strings.NewReplacer("{table}", table, "{cols}", pointColumns, "{P}", fmt.Sprint(points), "{VPD}", fmt.Sprint(varsPerDevice),
		"{end}", fmt.Sprint(endMs), "{step}", fmt.Sprint(step), "{half}", fmt.Sprint(max(1, step/2)), "{N}", fmt.Sprint(n),
		"{version}", fmt.Sprint(time.Now().UnixNano()))
	return r.Replace(q)
}

// ceilingStage measures clickhouse-client inserting the fleet's rows from a
// Native file: one stream (the ceiling the ratio uses) and, for reference,
// two concurrent streams of half the rows each.
type ceilingStage struct {
	b      *bench
	table  string
	rows   int64
	files  map[string]string
	insert string

	one, oneCPU, clientCPU, two, twoCPU, others, parts *figure
}

const ceilingDB = "bench_ceiling"

func (c *ceilingStage) prepare(ctx context.Context) error {
	b := c.b
	s := b.o.sizes
	vars := s.devices * s.vars
	c.rows = int64(vars) * int64(s.points)
	sec := b.section(fmt.Sprintf("1. Warehouse ceiling: clickhouse-client, %d rows (%d variables × %d points) in Native format from a file", c.rows, vars, s.points))
	c.table = ceilingDB + ".datapoints"
	if err := b.migrate(ctx, ceilingDB); err != nil {
		return err
	}
	began := time.Now()
	if _, err := b.chClient(ctx, generateSQL(c.table, s.vars, vars, s.points, 30*24*time.Hour, time.Now().UnixMilli()), nil, nil); err != nil {
		return fmt.Errorf("generate rows: %w", err)
	}
	c.files = map[string]string{
		"all":   "",
		"half0": " WHERE cityHash64(variable_id) % 2 = 0",
		"half1": " WHERE cityHash64(variable_id) % 2 = 1",
	}
	for name, where := range c.files {
		path := filepath.Join(b.dir, "ceiling-"+name+".native")
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("native file: %w", err)
		}
		_, err = b.chClient(ctx, "SELECT "+pointColumns+" FROM "+c.table+where+" ORDER BY variable_id, ts_ms DESC FORMAT Native", nil, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("export %s: %w", name, err)
		}
		c.files[name] = path
	}
	st, err := os.Stat(c.files["all"])
	if err != nil {
		return fmt.Errorf("native file: %w", err)
	}
	b.logf("generated %d rows and the Native files (%.0f MB) in %.1fs", c.rows, float64(st.Size())/1e6, time.Since(began).Seconds())
	sec.note("Rows generated inside ClickHouse (`INSERT … SELECT … FROM numbers(%d)`) in fleetsim's shape (24-hex ids, 4 kinds, a quarter with a lat/lng context, one version), exported in the order fleetsync sends them (variable by variable, newest point first, as fleetsim serves frames) with `SELECT %s FROM %s ORDER BY variable_id, ts_ms DESC FORMAT Native` (%.0f MB); the table is truncated and the server idle (no merges) before each run.", c.rows, pointColumns, c.table, float64(st.Size())/1e6)
	sec.note("Timed command: `clickhouse-client --port P --query \"INSERT INTO %s (%s) FORMAT Native\" < file`; the schema is created by fleetsync's own `Migrate` (load/clickhouse), so it is the one fleetsync loads.", c.table, pointColumns)
	c.one = sec.fig("ceiling", "one stream", "rows/s", 0)
	c.oneCPU = sec.fig("", "one stream: clickhouse-server CPU per million rows", "CPU-s", 2)
	c.clientCPU = sec.fig("", "one stream: clickhouse-client CPU per million rows", "CPU-s", 2)
	c.two = sec.fig("ceiling2", "two concurrent streams (half the rows each)", "rows/s", 0)
	c.twoCPU = sec.fig("", "two streams: clickhouse-server CPU per million rows", "CPU-s", 2)
	c.parts = sec.fig("", "one stream: parts written (level 0)", "parts", 0)
	c.others = sec.fig("", "one stream: CPU used by other processes meanwhile", "cores", 2)
	c.insert = "INSERT INTO " + c.table + " (" + pointColumns + ") FORMAT Native"
	return nil
}

func (c *ceilingStage) run(ctx context.Context, r int) error {
	b := c.b
	for _, streams := range [][]string{{c.files["all"]}, {c.files["half0"], c.files["half1"]}} {
		if _, err := b.chClient(ctx, "TRUNCATE TABLE "+c.table, nil, nil); err != nil {
			return err
		}
		b.quiesce(ctx)
		cpu := startCPU(b.chPID)
		machine := startMachineCPU()
		began := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(streams))
		clientCPU := make([]float64, len(streams))
		for i, path := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				clientCPU[i], errs[i] = b.insertFile(ctx, c.insert, path)
			}()
		}
		wg.Wait()
		wall := time.Since(began)
		chCPU := cpu.stop()
		busy := machine.stop()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		n, err := b.count(ctx, c.table)
		if err != nil {
			return err
		}
		if n != c.rows {
			return fmt.Errorf("the table holds %d rows after the insert, want %d", n, c.rows)
		}
		rate := float64(c.rows) / wall.Seconds()
		mr := float64(c.rows) / 1e6
		others := busy - chCPU
		for _, v := range clientCPU {
			others -= v
		}
		if len(streams) == 1 {
			parts, err := b.insertedParts(ctx, ceilingDB)
			if err != nil {
				return err
			}
			c.parts.add(float64(parts))
			c.one.add(rate)
			c.oneCPU.add(chCPU / mr)
			c.clientCPU.add(clientCPU[0] / mr)
			c.others.add(max(0, others) / wall.Seconds())
		} else {
			c.two.add(rate)
			c.twoCPU.add(chCPU / mr)
		}
		b.logf("ceiling run %d, %d stream(s): %.2fs, %.0f rows/s, clickhouse CPU %.1fs, others %.1fs", r+1, len(streams), wall.Seconds(), rate, chCPU, others)
	}
	return nil
}

func (c *ceilingStage) finish(ctx context.Context) {
	for _, p := range c.files {
		_ = os.Remove(p)
	}
	_, _ = c.b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+ceilingDB, nil, nil)
}

// insertFile runs clickhouse-client with the file as its standard input,
// as `< file` does (no copy through this process), and returns the
// client's CPU time.
func (b *bench) insertFile(ctx context.Context, insert, path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("native file: %w", err)
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, clientBinary, "--host", "127.0.0.1", "--port", b.chPort, "--query", insert)
	cmd.Stdin = f
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("clickhouse-client insert from %s: %w: %s", filepath.Base(path), err, strings.TrimSpace(string(out)))
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(), nil
}
